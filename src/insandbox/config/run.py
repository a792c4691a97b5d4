"""RunConfig: the settings of one run, shared by the CLI and the Python API, checked once."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Optional

from pydantic import ConfigDict, ValidationError, field_validator

from ..core import defaults
from ..core.errors import ConfigError
from ..core.redact import redact, secrets_in
from .sections import CopyBack, ModelSettings, SandboxSettings, TaskLimits, view

if TYPE_CHECKING:
    from ..agent.env import EnvConfig
    from ..prompts import PromptConfig
    from ..sandbox.pool import SandboxPool

DEFAULT_IMAGE = defaults.IMAGE


class RunConfig(CopyBack, SandboxSettings, TaskLimits, ModelSettings):
    """Every setting of one run: the four sections' fields, flat (RunConfig(model=..., memory=...)),
    checked by the sections' own validators, and what only a run has. The bases are listed last section
    first because pydantic puts the last base's fields first: model, limits, sandbox, copy-back."""

    model_config = ConfigDict(extra="forbid", frozen=False)

    mode: Literal["sandbox", "llm"] = "sandbox"
    prompt_config: Optional[Path] = None
    input_dir: Optional[Path] = None
    output_dir: Optional[Path] = None  # the run folder; default runs/<timestamp>-<id>
    runs_root: Path = Path("runs")

    @field_validator("input_dir")
    @classmethod
    def _input_exists(cls, v: Optional[Path]) -> Optional[Path]:
        if v is not None and not Path(v).is_dir():
            raise ValueError(f"{v} is not a folder" if Path(v).exists() else f"{v} does not exist")
        return v

    @field_validator("prompt_config")
    @classmethod
    def _prompt_config_exists(cls, v: Optional[Path]) -> Optional[Path]:
        if v is not None and not Path(v).is_file():
            raise ValueError(f"{v} does not exist")
        return v

    # the sections, as frozen views (the builders below and on each section read them)
    @property
    def model_settings(self) -> ModelSettings:
        return view(ModelSettings, self)

    @property
    def limits(self) -> TaskLimits:
        return view(TaskLimits, self)

    @property
    def sandbox(self) -> SandboxSettings:
        return view(SandboxSettings, self)

    @property
    def copy_back(self) -> CopyBack:
        return view(CopyBack, self)

    def with_environment(self) -> RunConfig:
        """Fill model, base URL and key from the environment where not given."""
        env = os.environ
        return self.model_copy(update={
            "model": self.model or env.get("INSANDBOX_MODEL") or None,
            "base_url": self.base_url or env.get("INSANDBOX_BASE_URL") or None,
            "api_key": self.api_key or env.get("INSANDBOX_API_KEY") or env.get(
                "ANTHROPIC_API_KEY" if self.api == "anthropic" else "OPENAI_API_KEY") or None,
        })

    def secrets(self) -> set[str]:
        """The credentials in these settings: the API key (given, else the environment's) and those inside
        the base URL and extra_body."""
        key = self.api_key or self.with_environment().api_key
        return secrets_in(self.base_url, self.extra_body, *([key] if key else []))

    def public(self) -> dict:
        """Settings worth recording in the trajectory: never the API key, and the base URL and extra_body
        redacted (redact.py)."""
        data = self.model_dump(mode="json", exclude={"api_key"})
        data["api_key_set"] = bool(self.api_key)
        secrets = self.secrets()
        data["base_url"] = redact(data["base_url"], secrets)
        data["extra_body"] = redact(data["extra_body"], secrets)
        return data

    def env_config(self, prompts: PromptConfig, run_id: str = "", pool: Optional[SandboxPool] = None) -> EnvConfig:
        """The environment settings of one episode of this run (its sandbox from `pool` when given)."""
        from ..agent.env import EnvConfig

        return EnvConfig(prompts=prompts, run_id=run_id, pool=pool, **self.sandbox.env_fields(),
                         **self.limits.episode_fields(), copy_limits=self.copy_back.copy_limits())


def validated(data: dict) -> RunConfig:
    """A RunConfig, or a ConfigError saying in one line which setting is wrong and why."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(describe(e)) from None


def describe(e: ValidationError) -> str:
    """pydantic's errors as `--flag: what is wrong`, one per setting, on one line."""
    parts = []
    for err in e.errors():
        field = ".".join(str(x) for x in err.get("loc", ())) or "settings"
        msg = err.get("msg", "invalid")
        msg = msg.removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            msg = "unknown setting"
        parts.append(f"--{field.replace('_', '-')}: {msg}")
    return "; ".join(parts)
