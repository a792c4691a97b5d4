"""A run's settings: RunConfig (run.py) made of four sections declared once (sections.py: the model,
the task's limits, the sandbox, copy-back), each turned into what the layer below takes in one place;
and recorded settings whose credentials were redacted (recorded.py)."""
from ..core.errors import ConfigError
from .recorded import refuse_redacted, restored
from .run import DEFAULT_IMAGE, RunConfig, describe, validated
from .sections import TOOL_CHOICES, CopyBack, ModelSettings, SandboxSettings, TaskLimits

__all__ = ["DEFAULT_IMAGE", "TOOL_CHOICES", "ConfigError", "CopyBack", "ModelSettings", "RunConfig", "SandboxSettings",
           "TaskLimits", "describe", "refuse_redacted", "restored", "validated"]
