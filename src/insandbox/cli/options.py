"""Every option that more than one command takes, declared once in OPTIONS: its type, help, default,
metavar, the RunConfig field it sets and how its value becomes that field's; and `--config`.

    @shared_options(*RUN)                      run and bench: all of them, with run's defaults
    @shared_options(*GRANTS[1:], unset=True)   replay: the sandbox's, None when not given (as recorded)
    @shared_options(*LIMITS, *SANDBOX, defaults_of=...)   rl rollout: with RolloutConfig's defaults

appends them to a command's own parameters (so --help lists them after the command's own, in the
table's order), and the command gets their values as one dict, `shared`. `settings(shared)` turns
that dict into RunConfig fields by the same table. An option's section in a config file (config_file.py)
is the RunConfig section its field is in (`section_of`).
"""
from __future__ import annotations

import functools
import inspect
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..core import defaults
from ..core.units import format_size, parse_size
from .common import BadArgument

M, T, S, C = "Model", "Task limits", "Sandbox", "Copy-back"
CONFIG = Annotated[Optional[Path], typer.Option(
    "--config", "-c", metavar="FILE", show_default=False,
    help="YAML of option values in sections (model:, limits:, sandbox:, copy_back: and the command's own); the "
         "command line overrides it (docs/configuration.md).")]


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Option:
    kind: Any  # the value's type, as typer reads it
    default: Any  # run's and bench's
    help: str
    panel: str
    field: str  # the RunConfig field it sets
    read: Callable[[Any], Any] = _same  # a given value -> the field's value (BadArgument when it cannot be)
    flag: Optional[str] = None  # its name on the command line, where not the field's with - for _
    metavar: Optional[str] = None
    shown: Optional[str] = None  # the default in words, where the value itself says nothing (None: "the server's")

    def annotation(self, default: Any = None, unset: bool = False) -> Any:
        """What typer reads for this option: its default shown as `default` is (unset: "as recorded")."""
        shown: Any = True
        if unset:
            shown = False
        elif self.shown is not None and default == self.default:
            shown = self.shown
        return Annotated[self.kind, typer.Option(*((self.flag,) if self.flag else ()), help=self.help,
                                                 rich_help_panel=self.panel, metavar=self.metavar,
                                                 show_default=shown)]


OPTIONS: dict[str, Option] = {}


def _declare(name: str, kind: Any, default: Any, help: str, panel: str, *, metavar: Optional[str] = None,
             shown: Optional[str] = None, flag: Optional[str] = None, field: Optional[str] = None,
             read: Callable[[Any], Any] = _same) -> None:
    OPTIONS[name] = Option(kind, default, help, panel, field or name, read, flag, metavar, shown)


# ---------------------------------------------------------------------- what a value becomes
def _one_of(flag: str, *choices: str) -> Callable[[str], str]:
    def read(value: str) -> str:
        if value not in choices:
            raise BadArgument(f"{flag} {value}: use {' or '.join(choices)}")
        return value
    return read


def _zero_is_none(value: Any) -> Any:
    """0 (or '') on the command line: no limit."""
    return value or None


def _limit_text(value: str) -> Optional[str]:
    """A size RunConfig checks itself (memory, disk); none or 0: no limit."""
    return None if value.strip().lower() in ("none", "0", "") else value


def _bytes(flag: str) -> Callable[[str], Optional[int]]:
    def read(value: str) -> Optional[int]:
        if value.strip().lower() in ("none", ""):
            return None
        try:
            return parse_size(value)
        except ValueError as e:
            raise BadArgument(f"{flag}: {e}") from None
    return read


def _extra_body(text: str) -> Optional[dict]:
    try:
        body = json.loads(text) if text else None
    except ValueError as e:
        raise BadArgument(f"--extra-body is not valid JSON: {e}") from None
    if body is not None and not isinstance(body, dict):
        raise BadArgument("--extra-body must be a JSON object")
    return body


def _env(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadArgument(f"--env wants KEY=VALUE, got {item!r}")
        env[key] = value
    return env


# ---------------------------------------------------------------------- the table, in --help's order
_declare("model", Optional[str], None, "Model name, as the server knows it [env INSANDBOX_MODEL].", M, metavar="NAME",
         shown="the server's first model")
_declare("base_url", Optional[str], None, "The model server, e.g. http://localhost:8000/v1 [env INSANDBOX_BASE_URL].",
         M, metavar="URL", shown="Anthropic's API with --provider anthropic; none: the embedded model")
_declare("api_key", Optional[str], None, "API key [env INSANDBOX_API_KEY, then OPENAI_API_KEY, or ANTHROPIC_API_KEY "
         "with --provider anthropic].", M, metavar="KEY")
_declare("gguf", Optional[Path], None, "Serve this local GGUF model (with no model configured: the embedded "
         "SmolLM2-135M).", M, metavar="FILE")
_declare("prices", Optional[Path], None, "YAML of prices per model laid over the packaged table [env "
         "INSANDBOX_PRICES; see docs/guide/cost.md ('Cost')].", M, metavar="FILE")
_declare("provider", Optional[str], None, "The API: openai (chat completions: vLLM, SGLang, llama.cpp, Ollama, OpenAI) "
         "or anthropic (Messages API).", M, metavar="API", shown="anthropic for a model named anthropic/..., "
         "else openai", read=_one_of("--provider", "openai", "anthropic"))
_declare("tool_format", str, defaults.TOOL_FORMAT, "native: tools sent as the API's structured tools; text: their "
         "schemas and the <tool_call> convention go into the system prompt and calls are read from the reply (any "
         "chat model or server).", M, metavar="FORMAT", read=_one_of("--tool-format", "native", "text"))
_declare("stream", bool, False, "Stream replies: tokens shown as they come, time to first token recorded.", M)
_declare("stall_timeout", float, defaults.STALL_TIMEOUT_S, "Seconds a streamed reply may send nothing before the try "
         "fails (and is retried).", M, metavar="SECONDS")
_declare("logprobs", bool, False, "Record each sampled token's log probability in the trajectory (OpenAI-compatible "
         "servers).", M)
_declare("top_logprobs", int, 0, "With --logprobs: also this many most likely tokens per position.", M)
_declare("thinking_budget", Optional[int], None, "Anthropic: extended thinking with this many tokens (at least 1024), "
         "interleaved with tool calls.", M, metavar="TOKENS")
_declare("prompt_caching", bool, True, "Anthropic: mark the stable prefix and the conversation's end for prompt "
         "caching.", M)
_declare("temperature", Optional[float], None, "Sampling temperature.", M, shown="the server's")
_declare("max_tokens", Optional[int], None, "Completion tokens per model call.", M, metavar="TOKENS",
         shown="the server's")
_declare("extra_body", Optional[str], None, 'JSON merged into every request, e.g. \'{"chat_template_kwargs": '
         '{"enable_thinking": true}}\'.', M, metavar="JSON", read=_extra_body)
_declare("max_retries", int, defaults.MAX_RETRIES, "Retries of a failed model request (429, 5xx, timeouts, dropped "
         "connections, a body that is not a chat completion).", M)
_declare("request_timeout", float, defaults.REQUEST_TIMEOUT_S, "Seconds one model request may take.", M,
         metavar="SECONDS")
_declare("send_reasoning", bool, False, "Send the model's reasoning_content back with its turns (for models that "
         "expect to see it).", M)
_declare("tool_choice", str, defaults.TOOL_CHOICE, "tool_choice sent with the tools: auto, required, none, or omit "
         "(send none).", M, metavar="CHOICE", read=lambda v: None if v == "omit" else v)
_declare("max_steps", Optional[int], None, "Model calls at most.", T,
         shown=f"{defaults.MAX_STEPS}; bench: the task's")
_declare("token_budget", Optional[int], None, "Stop after this many prompt+completion tokens.", T, metavar="TOKENS")
_declare("time_limit", Optional[float], None, "Stop after this many seconds (sandbox start included).", T,
         metavar="SECONDS")
_declare("stuck_after", int, defaults.STUCK_AFTER, "Stop as `stuck` after the same tool calls with the same results "
         "this many times in a row (0: never).", T, read=_zero_is_none)
_declare("max_tool_calls_per_reply", int, defaults.MAX_TOOL_CALLS_PER_REPLY, "Tool calls of one reply that run, in "
         "order; each one after them is answered 'not run' (the model reads it).", T)
_declare("prompt_config", Optional[Path], None, "YAML with system_prompt and instance_prompt (bench: overrides the "
         "task's keys it sets).", T, metavar="FILE")
_declare("backend", str, defaults.BACKEND, "Sandbox backend: docker (a Docker engine, or Podman's through "
         "DOCKER_HOST) or bwrap (no engine and no root; see docs/backends/bwrap.md ('Without Docker: bubblewrap')), "
         "or one registered with insandbox.sandbox.register_backend.", S, metavar="NAME")
_declare("image", str, defaults.IMAGE, "Sandbox image (built on first use if it is insandbox:*).", S, metavar="IMAGE")
_declare("timeout_per_command", float, defaults.COMMAND_TIMEOUT_S, "Seconds before a command is killed with "
         "everything it started.", S, metavar="SECONDS")
_declare("output_limit", int, defaults.OUTPUT_LIMIT, "Characters of a tool's output the model sees (head and tail).", S,
         metavar="CHARS")
_declare("memory", str, defaults.MEMORY, "Sandbox memory limit, e.g. 512m, 4g ('none': no limit).", S, metavar="SIZE",
         read=_limit_text)
_declare("cpus", float, defaults.CPUS, "Sandbox CPU limit (0: no limit).", S, read=_zero_is_none)
_declare("pids_limit", int, defaults.PIDS, "Sandbox process limit (0: no limit).", S, read=_zero_is_none)
_declare("network", str, defaults.NETWORK, "Sandbox network: bridge (full egress), none, registries (PyPI and Debian "
         "only, through a proxy), host (warned), or an existing Docker network.", S, metavar="NETWORK")
_declare("pool_url", Optional[str], None, "Take sandboxes from a sandbox service (insandbox pool serve): "
         "unix:///path.sock or http://127.0.0.1:PORT [env INSANDBOX_POOL_URL].", S, metavar="URL",
         shown="start them here")
_declare("allow_hosts", Optional[list[str]], None, "With --network registries: let this host through too (HTTP and "
         "HTTPS; repeatable).", S, flag="--allow-host", metavar="HOST", read=list)
_declare("disk", str, defaults.DISK, "What a sandbox may write to its disk, e.g. 10g ('none': no limit; see "
         "docs/backends/docker.md ('The disk limit')).", S, metavar="SIZE", read=_limit_text)
_declare("runtime", Optional[str], None, "The engine's container runtime, e.g. runsc for gVisor.", S, metavar="NAME",
         shown="the engine's own", read=_zero_is_none)
_declare("cap_add", Optional[list[str]], None, "A capability the sandbox keeps beyond the few apt-get and pip need, "
         "e.g. SYS_PTRACE (repeatable).", S, flag="--cap-add", metavar="CAPABILITY", read=list)
_declare("env", Optional[list[str]], None, "KEY=VALUE set in the sandbox (repeatable).", S, flag="--env",
         metavar="KEY=VALUE", read=_env)
_declare("max_sandboxes", Optional[int], None, "Live sandboxes at most; more starts wait for one to close. Starts also "
         "wait while the host lacks memory, pids, open files or bridge ports [env INSANDBOX_MAX_SANDBOXES].", S,
         shown="no cap")
_declare("max_output_file_size", str, format_size(defaults.COPY_MAX_FILE_BYTES), "Files of the output folder bigger "
         "than this stay behind (recorded), e.g. 512m ('none': no limit).", C, metavar="SIZE",
         field="output_max_file_bytes", read=_bytes("--max-output-file-size"))
_declare("max_output_size", str, format_size(defaults.COPY_MAX_TOTAL_BYTES), "At most this much of the output folder "
         "comes back, e.g. 1g ('none': no limit).", C, metavar="SIZE", field="output_max_bytes",
         read=_bytes("--max-output-size"))
_declare("max_output_files", int, defaults.COPY_MAX_ENTRIES, "At most this many entries of the output folder come "
         "back, folders, links and special files counted as files are (0: no limit).", C,
         field="output_max_files", read=_zero_is_none)

RUN = tuple(OPTIONS)  # run and bench take every one
SANDBOX = tuple(n for n, o in OPTIONS.items() if o.panel == S)  # every command that starts sandboxes
LIMITS = ("max_steps", "token_budget", "time_limit", "stuck_after", "max_tool_calls_per_reply")  # an episode's
# what a fork may change of the recorded model and task
FORK_MODEL = ("model", "base_url", "api_key", "provider", "gguf", "tool_format", "temperature", "max_tokens",
              "max_steps", "extra_body")
# the sandbox options that may grant a recorded run more than the defaults (replay/grants.py)
GRANTS = ("image", "network", "cap_add", "runtime", "memory", "cpus", "pids_limit", "disk", "max_output_file_size",
          "max_output_size", "max_output_files")


def shared_options(*names: str, unset: bool = False, defaults_of: Optional[dict] = None, **own: Any) -> Callable:
    """Append the options `names` to the decorated command's parameters, in this order; the command
    receives their values as one dict, its keyword argument `shared`. unset: each defaults to None, "not
    given" (replay and fork: as recorded). defaults_of: name=value for a command whose settings default
    otherwise (rl rollout: RolloutConfig's). own: name=Annotated[...] for a command that words one its own way."""
    defaults_of = defaults_of or {}

    def decorate(command: Callable) -> Callable:
        signature = inspect.signature(command, eval_str=True)
        params = [p for name, p in signature.parameters.items() if name != "shared"]
        for name in names:
            default = None if unset else defaults_of.get(name, OPTIONS[name].default)
            kind = own.get(name) or OPTIONS[name].annotation(default, unset)
            params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=default))

        @functools.wraps(command)
        def with_shared(*args, **kwargs):
            return command(*args, shared={name: kwargs.pop(name) for name in names}, **kwargs)

        with_shared.__signature__ = signature.replace(parameters=params)  # what typer reads
        with_shared.shared_options = names  # config_file.py: these go in their section, the rest in the command's
        return with_shared
    return decorate


@functools.cache
def section_of(name: str) -> Optional[str]:
    """The config-file section of option `name`: the RunConfig section its field is in (model, limits,
    sandbox, copy_back); None for a command's own option."""
    from ..config.sections import CopyBack, ModelSettings, SandboxSettings, TaskLimits

    option = OPTIONS.get(name)
    if option is None:
        return None
    for section, fields in (("model", ModelSettings), ("limits", TaskLimits), ("sandbox", SandboxSettings),
                            ("copy_back", CopyBack)):
        if option.field in fields.model_fields:
            return section
    return None


def settings(shared: dict) -> dict:
    """RunConfig fields from the options' values: an option left at None is not given (the field keeps
    its default, or the recorded value); BadArgument for what typer cannot check."""
    return {OPTIONS[name].field: OPTIONS[name].read(value) for name, value in shared.items() if value is not None}


def run_settings(shared: dict) -> dict:
    """The RunConfig fields of run and bench."""
    if shared.get("network") == "host":
        _warn_host_network()
    return settings(shared)


def sandbox_given(shared: dict) -> dict:
    """The sandbox options replay and fork were given, as RunConfig fields (absent: not given; a value of
    None: no limit), checked as run checks them (capability names normalised). Only these grant what a
    run folder asks beyond the defaults (replay/grants.py). BadArgument or ConfigError for a bad value."""
    from ..config import validated

    given = settings({name: shared[name] for name in GRANTS})
    checked = validated(given)
    return {k: getattr(checked, k) for k in given}


def _warn_host_network() -> None:
    """Documented, but easy to miss: said every time."""
    typer.echo("insandbox: warning: --network host gives the sandbox this machine's network: the model's code "
               "can reach every service listening on localhost here (the model server included) and every "
               "network this machine can reach", err=True)


def show_granted(granted: list[str]) -> None:
    """Once nothing is refused any more: what the command line gave beyond the defaults."""
    if "--network host" in granted:
        _warn_host_network()
    if granted:
        typer.echo(f"insandbox: granted from the command line: {', '.join(granted)}", err=True)


def read_query(query: Optional[str], query_file: Optional[Path]) -> str:
    if query_file is not None:
        try:
            query = query_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise BadArgument(f"--query-file {query_file}: {getattr(e, 'strerror', None) or e}") from None
    elif query == "-":
        query = sys.stdin.read()
    if not query or not query.strip():
        raise BadArgument('no task given: insandbox run "your task" (or --query-file FILE, or - for stdin)')
    return query
