"""Settings of one run, shared by the CLI and the Python API."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .core import defaults
from .core.errors import ConfigError  # noqa: F401 (raised for bad settings)
from .core.redact import fits, is_redacted, redact, secrets_in
from .core.units import parse_size

if TYPE_CHECKING:
    from .agent.env import EnvConfig
    from .prompts import PromptConfig
    from .sandbox import SandboxLimits
    from .sandbox.pool import SandboxPool

DEFAULT_IMAGE = defaults.IMAGE
TOOL_CHOICES = ("auto", "required", "none")
# bridge, none and host are Docker's own, registries is ours (package registries only, through a
# proxy: sandbox/proxy.py); any other name must be an existing Docker network
_NETWORK_NAME = re.compile(r"^(container:)?[A-Za-z0-9][A-Za-z0-9_.-]*$")
# Docker's image reference grammar: [registry[:port]/]name[/name...][:tag][@algorithm:hex], the
# name's components lowercase; anything else never reaches the engine
_NAME_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_IMAGE_REF = re.compile(
    rf"(?P<name>(?:(?:{_HOST_PART}(?:\.{_HOST_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?/)?{_NAME_PART}(?:/{_NAME_PART})*)"
    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?", re.ASCII)






class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # the model
    provider: Optional[Literal["openai", "anthropic"]] = None  # the API; None: anthropic for an anthropic/ model
    model: Optional[str] = None  # default: $INSANDBOX_MODEL, else the server's first model
    base_url: Optional[str] = None  # default: $INSANDBOX_BASE_URL
    api_key: Optional[str] = Field(default=None, repr=False)  # default: $INSANDBOX_API_KEY, $OPENAI_API_KEY
    temperature: Optional[float] = None  # None: the server's default
    max_tokens: Optional[int] = Field(default=None, ge=1)  # per model call; None: the server's default
    extra_body: Optional[dict] = None  # merged into each request, e.g. {"chat_template_kwargs": {...}}
    max_retries: int = Field(default=5, ge=0)
    request_timeout: float = Field(default=600.0, gt=0)  # seconds for one model request
    send_reasoning: bool = False  # send reasoning_content back in the history
    tool_choice: Optional[str] = "auto"  # sent whenever tools are offered; None: never sent
    tool_format: Literal["native", "text"] = "native"  # text: tools in the system prompt, calls read from text
    stream: bool = False  # stream replies (server-sent events): tokens shown as they come, time to first token
    stall_timeout: float = Field(default=120.0, gt=0)  # seconds a stream may send nothing before the try fails
    logprobs: bool = False  # record each sampled token's log probability (OpenAI-compatible servers)
    top_logprobs: int = Field(default=0, ge=0, le=20)  # and this many alternatives per token
    thinking_budget: Optional[int] = Field(default=None, ge=1024)  # Anthropic extended thinking, in tokens
    prompt_caching: bool = True  # Anthropic: cache_control on the stable prefix and the conversation's end
    gguf: Optional[Path] = None  # a local GGUF model, served by the embedded server
    n_ctx: Optional[int] = None  # the embedded server's context window (default: the model's, at most 16k)
    prices: Optional[Path] = None  # a price file laid over the packaged table (pricing.py)

    # the task
    mode: Literal["sandbox", "llm"] = "sandbox"
    max_steps: int = Field(default=defaults.MAX_STEPS, ge=1)
    token_budget: Optional[int] = Field(default=None, ge=1)
    time_limit: Optional[float] = Field(default=None, gt=0)
    stuck_after: Optional[int] = Field(default=defaults.STUCK_AFTER, ge=2)  # identical steps -> `stuck`; None: off
    prompt_config: Optional[Path] = None
    input_dir: Optional[Path] = None
    output_dir: Optional[Path] = None  # the run folder; default runs/<timestamp>-<id>
    runs_root: Path = Path("runs")

    # the sandbox
    backend: str = defaults.BACKEND
    image: str = DEFAULT_IMAGE
    timeout_per_command: float = Field(default=defaults.COMMAND_TIMEOUT_S, gt=0)
    output_limit: int = Field(default=defaults.OUTPUT_LIMIT, ge=200)  # characters per observation
    memory: Optional[str] = defaults.MEMORY
    cpus: Optional[float] = Field(default=defaults.CPUS, gt=0)
    pids_limit: Optional[int] = Field(default=defaults.PIDS, ge=1)
    network: str = defaults.NETWORK
    disk: Optional[str] = defaults.DISK  # what a sandbox may write to its own filesystem
    runtime: Optional[str] = None  # the engine's OCI runtime (e.g. runsc); None: its default
    cap_add: list[str] = Field(default_factory=list)  # capabilities beyond the few a sandbox keeps
    env: dict[str, str] = Field(default_factory=dict)
    build_image: bool = True  # build the image when it is missing (insandbox images only)
    # live sandboxes of this process at most; more starts wait (sandbox/admission.py); None: $INSANDBOX_MAX_SANDBOXES
    max_sandboxes: Optional[int] = Field(default=None, ge=1)

    # copy-back of the output folder (None: no limit)
    output_max_file_bytes: Optional[int] = Field(default=defaults.COPY_MAX_FILE_BYTES, ge=0)
    output_max_bytes: Optional[int] = Field(default=defaults.COPY_MAX_TOTAL_BYTES, ge=0)
    output_max_files: Optional[int] = Field(default=defaults.COPY_MAX_FILES, ge=0)

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

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and v not in TOOL_CHOICES:
            raise ValueError(f"{v!r}: use {', '.join(TOOL_CHOICES)} (or none at all: omit)")
        return v

    @field_validator("network")
    @classmethod
    def _network(cls, v: str) -> str:
        if not _NETWORK_NAME.match(v):
            raise ValueError(f"{v!r} is not a network: use bridge, none, registries, host or the name of a "
                             "Docker network")
        return v

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        m = _IMAGE_REF.fullmatch(v)
        if not m or len(m.group("name")) > 255:
            raise ValueError(f"{v!r} is not an image name ([registry[:port]/]name[:tag][@sha256:...], the name in "
                             "lowercase)")
        return v

    @field_validator("memory", "disk")
    @classmethod
    def _size(cls, v: Optional[str]) -> Optional[str]:
        if v is not None:
            parse_size(v)
        return v

    @field_validator("cap_add")
    @classmethod
    def _capabilities(cls, v: list[str]) -> list[str]:
        for cap in v:
            if not re.fullmatch(r"(CAP_)?[A-Z_]+", cap.upper()):
                raise ValueError(f"{cap!r} is not a capability name (e.g. NET_RAW, SYS_PTRACE)")
        return [cap.upper().removeprefix("CAP_") for cap in v]

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"{key!r} is not a variable name")
        return v

    def with_environment(self) -> RunConfig:
        """Fill model, base URL and key from the environment where not given."""
        env = os.environ
        return self.model_copy(update={
            "model": self.model or env.get("INSANDBOX_MODEL") or None,
            "base_url": self.base_url or env.get("INSANDBOX_BASE_URL") or None,
            "api_key": self.api_key or env.get("INSANDBOX_API_KEY") or env.get(
                "ANTHROPIC_API_KEY" if self.api == "anthropic" else "OPENAI_API_KEY") or None,
        })

    @property
    def api(self) -> str:
        """The API the model is reached through: `provider`, else anthropic for an `anthropic/` model."""
        if self.provider:
            return self.provider
        model = self.model or os.environ.get("INSANDBOX_MODEL") or ""
        return "anthropic" if model.startswith("anthropic/") else "openai"

    @property
    def embedded(self) -> bool:
        """No endpoint configured (or --gguf given): the run serves a local model itself."""
        return self.gguf is not None or (not self.model and not self.base_url)

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

    def sandbox_limits(self) -> SandboxLimits:
        from .sandbox import SandboxLimits

        return SandboxLimits(self.memory, self.cpus, self.pids_limit, self.network, self.disk, self.runtime,
                             tuple(self.cap_add))

    def env_config(self, prompts: PromptConfig, run_id: str = "", pool: Optional[SandboxPool] = None) -> EnvConfig:
        """The environment settings of one episode of this run (its sandbox from `pool` when given)."""
        from .agent.env import EnvConfig
        from .sandbox import CopyLimits

        return EnvConfig(
            prompts=prompts, image=self.image, backend=self.backend, run_id=run_id, pool=pool,
            limits=self.sandbox_limits(), env_vars=dict(self.env),
            max_steps=self.max_steps, token_budget=self.token_budget, time_limit=self.time_limit,
            stuck_after=self.stuck_after, command_timeout=self.timeout_per_command,
            output_limit_chars=self.output_limit,
            copy_limits=CopyLimits(self.output_max_file_bytes, self.output_max_bytes, self.output_max_files))


def refuse_redacted(settings: dict, flags: dict[str, str]) -> None:
    """A ConfigError when a recorded setting (key of `flags`) lost a credential to redaction: sent as
    recorded it would fail in a confusing way, so the user must give it again with its flag."""
    for key, flag in flags.items():
        if is_redacted(settings.get(key)):
            raise ConfigError(f"the recorded {flag} held a credential, which insandbox never stores "
                              f"({_shown(settings.get(key))}): give it again with {flag}")


def restored(recorded, given, flag: str):
    """A recorded setting, or where its credential was redacted the `given` one that matches it
    (a ConfigError when none is given, or one that differs elsewhere)."""
    if not is_redacted(recorded):
        return recorded
    if given is None:
        refuse_redacted({"v": recorded}, {"v": flag})
    if not fits(recorded, given):
        raise ConfigError(f"{flag} {_shown(given)} is not the recorded {_shown(recorded)} (the run's own settings "
                          "are used: give the same value)")
    return given


def _shown(value) -> str:
    return redact(value) if isinstance(value, str) else json.dumps(redact(value))


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
