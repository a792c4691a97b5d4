"""A run's settings in four sections, each declared once with its checks, and the one place that turns
each into what the layer below takes:

    ModelSettings    -> the model client's keyword arguments   (client_kwargs)
    TaskLimits       -> the episode's limits                   (episode_fields, for EnvConfig)
    SandboxSettings  -> SandboxLimits, SandboxSpec, and the sandbox part of an EnvConfig
    CopyBack         -> CopyLimits

RunConfig (run.py) is all four plus what only a run has; RL's rollout settings can take
SandboxSettings the same way. Sections are frozen: `cfg.sandbox` is a view, not a handle to change.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.fields import FieldInfo

from ..core import defaults
from ..core.units import parse_size

if TYPE_CHECKING:
    from ..sandbox import CopyLimits, SandboxLimits, SandboxSpec

TOOL_CHOICES = ("auto", "required", "none")
# bridge, none and host are Docker's own, registries is ours (package registries only, through a
# proxy: sandbox/docker/proxy.py); any other name must be an existing Docker network
_NETWORK_NAME = re.compile(r"^(container:)?[A-Za-z0-9][A-Za-z0-9_.-]*$")
_HOST_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")
# Docker's image reference grammar: [registry[:port]/]name[/name...][:tag][@algorithm:hex], the
# name's components lowercase; anything else never reaches the engine
_NAME_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_IMAGE_REF = re.compile(
    rf"(?P<name>(?:(?:{_HOST_PART}(?:\.{_HOST_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?/)?{_NAME_PART}(?:/{_NAME_PART})*)"
    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?", re.ASCII)

_SECTION = ConfigDict(extra="forbid", frozen=True)


class ModelSettings(BaseModel):
    """The model and how it is called."""

    model_config = _SECTION

    provider: Optional[Literal["openai", "anthropic"]] = None  # the API; None: anthropic for an anthropic/ model
    model: Optional[str] = None  # default: $INSANDBOX_MODEL, else the server's first model
    base_url: Optional[str] = None  # default: $INSANDBOX_BASE_URL
    api_key: Optional[str] = Field(default=None, repr=False)  # default: $INSANDBOX_API_KEY, $OPENAI_API_KEY
    temperature: Optional[float] = None  # None: the server's default
    max_tokens: Optional[int] = Field(default=None, ge=1)  # per model call; None: the server's default
    extra_body: Optional[dict] = None  # merged into each request, e.g. {"chat_template_kwargs": {...}}
    max_retries: int = Field(default=defaults.MAX_RETRIES, ge=0)
    request_timeout: float = Field(default=defaults.REQUEST_TIMEOUT_S, gt=0)  # seconds for one model request
    send_reasoning: bool = False  # send reasoning_content back in the history
    tool_choice: Optional[str] = defaults.TOOL_CHOICE  # sent whenever tools are offered; None: never sent
    tool_format: Literal["native", "text"] = defaults.TOOL_FORMAT  # text: tools in the system prompt
    stream: bool = False  # stream replies (server-sent events): tokens shown as they come, time to first token
    stall_timeout: float = Field(default=defaults.STALL_TIMEOUT_S, gt=0)  # a silent stream's try fails after
    logprobs: bool = False  # record each sampled token's log probability (OpenAI-compatible servers)
    top_logprobs: int = Field(default=0, ge=0, le=20)  # and this many alternatives per token
    thinking_budget: Optional[int] = Field(default=None, ge=1024)  # Anthropic extended thinking, in tokens
    prompt_caching: bool = True  # Anthropic: cache_control on the stable prefix and the conversation's end
    gguf: Optional[Path] = None  # a local GGUF model, served by the embedded server
    n_ctx: Optional[int] = None  # the embedded server's context window (default: the model's, at most 16k)
    prices: Optional[Path] = None  # a price file laid over the packaged table (pricing.py)

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and v not in TOOL_CHOICES:
            raise ValueError(f"{v!r}: use {', '.join(TOOL_CHOICES)} (or none at all: omit)")
        return v

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

    def client_kwargs(self) -> dict:
        """The keyword arguments every model client takes (models/): how each request is made."""
        return dict(temperature=self.temperature, max_tokens=self.max_tokens, extra_body=self.extra_body,
                    timeout=self.request_timeout, max_retries=self.max_retries, send_reasoning=self.send_reasoning,
                    tool_choice=self.tool_choice, stream=self.stream, stall_timeout=self.stall_timeout,
                    logprobs=self.logprobs, top_logprobs=self.top_logprobs, tool_format=self.tool_format)


class TaskLimits(BaseModel):
    """When an episode stops (core/episode.py's Limits)."""

    model_config = _SECTION

    max_steps: int = Field(default=defaults.MAX_STEPS, ge=1)
    token_budget: Optional[int] = Field(default=None, ge=1)
    time_limit: Optional[float] = Field(default=None, gt=0)
    stuck_after: Optional[int] = Field(default=defaults.STUCK_AFTER, ge=2)  # identical steps -> `stuck`; None: off
    max_tool_calls_per_reply: int = Field(default=defaults.MAX_TOOL_CALLS_PER_REPLY, ge=1)  # the rest: not run

    def episode_fields(self) -> dict:
        """These limits as EnvConfig fields."""
        return dict(max_steps=self.max_steps, token_budget=self.token_budget, time_limit=self.time_limit,
                    stuck_after=self.stuck_after, max_tool_calls_per_reply=self.max_tool_calls_per_reply)


class SandboxSettings(BaseModel):
    """The sandbox: which backend and image, its resources and what it sees."""

    model_config = _SECTION

    backend: str = defaults.BACKEND
    image: str = defaults.IMAGE
    timeout_per_command: float = Field(default=defaults.COMMAND_TIMEOUT_S, gt=0)
    output_limit: int = Field(default=defaults.OUTPUT_LIMIT, ge=200)  # characters per observation
    memory: Optional[str] = defaults.MEMORY  # a size (512m, 4g): checked here, read into bytes by SandboxLimits
    cpus: Optional[float] = Field(default=defaults.CPUS, gt=0)
    pids_limit: Optional[int] = Field(default=defaults.PIDS, ge=1)
    network: str = defaults.NETWORK
    allow_hosts: list[str] = Field(default_factory=list)  # --network registries: these hosts too (HTTP and HTTPS)
    disk: Optional[str] = defaults.DISK  # what a sandbox may write to its own filesystem
    runtime: Optional[str] = None  # the engine's OCI runtime (e.g. runsc); None: its default
    cap_add: list[str] = Field(default_factory=list)  # capabilities beyond the few a sandbox keeps
    env: dict[str, str] = Field(default_factory=dict)
    build_image: bool = True  # build the image when it is missing (insandbox images only)
    # live sandboxes of this process at most; more starts wait (sandbox/admission.py); None: $INSANDBOX_MAX_SANDBOXES
    max_sandboxes: Optional[int] = Field(default=None, ge=1)
    # sandboxes from a sandbox service (`insandbox pool serve`) instead of started here; None: $INSANDBOX_POOL_URL
    pool_url: Optional[str] = None

    @field_validator("network")
    @classmethod
    def _network(cls, v: str) -> str:
        if not _NETWORK_NAME.match(v):
            raise ValueError(f"{v!r} is not a network: use bridge, none, registries, host or the name of a "
                             "Docker network")
        return v

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, v: list[str]) -> list[str]:
        for host in v:
            if not _HOST_NAME.fullmatch(host.lower()):
                raise ValueError(f"{host!r} is not a host name")
        return sorted({h.lower() for h in v})

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

    def sandbox_limits(self) -> SandboxLimits:
        from ..sandbox import SandboxLimits

        return SandboxLimits(self.memory, self.cpus, self.pids_limit, self.network, self.disk, self.runtime,
                             tuple(self.cap_add), tuple(self.allow_hosts))

    def sandbox_spec(self, run_id: str = "") -> SandboxSpec:
        """What a sandbox of these settings is started from (the run's own episodes take theirs from
        their EnvConfig, which also knows the prompt's working folder)."""
        from ..sandbox import SandboxSpec

        return SandboxSpec(image=self.image, limits=self.sandbox_limits(), env=dict(self.env), run_id=run_id,
                           output_limit_chars=self.output_limit, build_image=self.build_image)

    def served_by(self) -> Optional[str]:
        """The sandbox service's URL: --pool-url, else $INSANDBOX_POOL_URL, else None (sandboxes start here)."""
        import os

        return self.pool_url or os.environ.get("INSANDBOX_POOL_URL") or None

    @field_validator("pool_url")
    @classmethod
    def _pool_url(cls, v: Optional[str]) -> Optional[str]:
        if v:
            from ..sandbox.served.protocol import parse_url

            parse_url(v)
        return v or None

    def env_fields(self) -> dict:
        """These settings as EnvConfig fields (agent/env.py)."""
        return dict(backend=self.backend, image=self.image, limits=self.sandbox_limits(), env_vars=dict(self.env),
                    command_timeout=self.timeout_per_command, output_limit_chars=self.output_limit,
                    pool_url=self.served_by())


class CopyBack(BaseModel):
    """What comes back from the output folder at most (None: no limit)."""

    model_config = _SECTION

    output_max_file_bytes: Optional[int] = Field(default=defaults.COPY_MAX_FILE_BYTES, ge=0)
    output_max_bytes: Optional[int] = Field(default=defaults.COPY_MAX_TOTAL_BYTES, ge=0)
    output_max_files: Optional[int] = Field(default=defaults.COPY_MAX_ENTRIES, ge=0)  # entries of any kind

    def copy_limits(self) -> CopyLimits:
        from ..sandbox import CopyLimits

        return CopyLimits(self.output_max_file_bytes, self.output_max_bytes, self.output_max_files)


def view(section: type[BaseModel], settings: BaseModel) -> BaseModel:
    """`section`'s fields of `settings` (already checked) as a frozen copy."""
    return section.model_construct(**{name: getattr(settings, name) for name in section.model_fields})


def with_default(section: type[BaseModel], name: str, default: object) -> FieldInfo:
    """`section`'s field `name`, its checks kept, with another default: for settings made of a section whose
    own use needs other defaults (RL rollouts' limits)."""
    return FieldInfo.merge_field_infos(section.model_fields[name], default=default)
