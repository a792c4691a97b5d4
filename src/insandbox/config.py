"""Settings of one run, shared by the CLI and the Python API."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_IMAGE = "insandbox:latest"


class ConfigError(ValueError):
    """A setting is missing or wrong; the message says how to fix it."""


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # the model
    model: Optional[str] = None  # default: $INSANDBOX_MODEL, else the server's first model
    base_url: Optional[str] = None  # default: $INSANDBOX_BASE_URL
    api_key: Optional[str] = Field(default=None, repr=False)  # default: $INSANDBOX_API_KEY, $OPENAI_API_KEY
    temperature: Optional[float] = None  # None: the server's default
    max_tokens: Optional[int] = None  # per model call; None: the server's default
    extra_body: Optional[dict] = None  # merged into each request, e.g. {"chat_template_kwargs": {...}}
    max_retries: int = 5
    request_timeout: float = 600.0
    send_reasoning: bool = False  # send reasoning_content back in the history
    gguf: Optional[Path] = None  # a local GGUF model, served by the embedded server
    n_ctx: Optional[int] = None  # the embedded server's context window (default: the model's, at most 16k)

    # the task
    mode: Literal["sandbox", "llm"] = "sandbox"
    max_steps: int = Field(default=100, ge=1)
    token_budget: Optional[int] = Field(default=None, ge=1)
    time_limit: Optional[float] = Field(default=None, gt=0)
    prompt_config: Optional[Path] = None
    input_dir: Optional[Path] = None
    output_dir: Optional[Path] = None  # the run folder; default runs/<timestamp>-<id>
    runs_root: Path = Path("runs")

    # the sandbox
    image: str = DEFAULT_IMAGE
    timeout_per_command: float = Field(default=120.0, gt=0)
    output_limit: int = Field(default=16000, ge=200)  # characters per observation
    memory: Optional[str] = "4g"
    cpus: Optional[float] = 2.0
    pids_limit: Optional[int] = 1024
    network: str = "bridge"
    env: dict[str, str] = Field(default_factory=dict)
    build_image: bool = True  # build the image when it is missing (insandbox images only)

    @field_validator("input_dir")
    @classmethod
    def _input_exists(cls, v: Optional[Path]) -> Optional[Path]:
        if v is not None and not Path(v).exists():
            raise ValueError(f"input dir {v} does not exist")
        return v

    def with_environment(self) -> RunConfig:
        """Fill model, base URL and key from the environment where not given."""
        env = os.environ
        return self.model_copy(update={
            "model": self.model or env.get("INSANDBOX_MODEL") or None,
            "base_url": self.base_url or env.get("INSANDBOX_BASE_URL") or None,
            "api_key": self.api_key or env.get("INSANDBOX_API_KEY") or env.get("OPENAI_API_KEY") or None,
        })

    @property
    def embedded(self) -> bool:
        """No endpoint configured (or --gguf given): the run serves a local model itself."""
        return self.gguf is not None or (not self.model and not self.base_url)

    def public(self) -> dict:
        """Settings worth recording in the trajectory (never the API key)."""
        data = self.model_dump(mode="json", exclude={"api_key"})
        data["api_key_set"] = bool(self.api_key)
        return data
