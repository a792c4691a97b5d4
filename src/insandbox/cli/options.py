"""Every option of the commands, declared once (run, bench, replay, fork and rl use the same
declarations), and what turns their values into settings."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import BadArgument

M, T, S = "Model", "Task limits", "Sandbox"


Model = Annotated[Optional[str], typer.Option(
    help="Model name [env INSANDBOX_MODEL; default: the server's first model].", rich_help_panel=M)]


BaseUrl = Annotated[Optional[str], typer.Option(
    help="The model server, e.g. http://localhost:8000/v1 [env INSANDBOX_BASE_URL; Anthropic: its API by "
         "default].", rich_help_panel=M)]


ApiKey = Annotated[Optional[str], typer.Option(
    help="API key [env INSANDBOX_API_KEY, then OPENAI_API_KEY, or ANTHROPIC_API_KEY with --provider anthropic].",
    rich_help_panel=M)]


Provider = Annotated[Optional[str], typer.Option(
    help="The API: openai (chat completions: vLLM, SGLang, llama.cpp, Ollama, OpenAI) or anthropic (Messages API) "
         "[default: anthropic for a model named anthropic/..., else openai].", rich_help_panel=M)]


ToolFormat = Annotated[str, typer.Option(help="native: tools sent as the API's structured tools; text: their schemas "
                                              "and the <tool_call> convention go into the system prompt and calls "
                                              "are read from the reply (any chat model or server).",
                                         rich_help_panel=M)]


Stream = Annotated[bool, typer.Option(help="Stream replies: tokens shown as they come, time to first token "
                                           "recorded.", rich_help_panel=M)]


StallTimeout = Annotated[float, typer.Option(help="Seconds a streamed reply may send nothing before the try fails "
                                                  "(and is retried).", rich_help_panel=M)]


Logprobs = Annotated[bool, typer.Option(help="Record each sampled token's log probability in the trajectory "
                                             "(OpenAI-compatible servers).", rich_help_panel=M)]


TopLogprobs = Annotated[int, typer.Option(help="With --logprobs: also this many most likely tokens per position.",
                                          rich_help_panel=M)]


ThinkingBudget = Annotated[Optional[int], typer.Option(help="Anthropic: extended thinking with this many tokens "
                                                            "(at least 1024), interleaved with tool calls.",
                                                       rich_help_panel=M)]


PromptCaching = Annotated[bool, typer.Option(help="Anthropic: mark the stable prefix and the conversation's end for "
                                                  "prompt caching.", rich_help_panel=M)]


Gguf = Annotated[Optional[Path], typer.Option(
    help="Serve this local GGUF model (the default with no model configured: the embedded SmolLM2-135M).",
    rich_help_panel=M)]


Prices = Annotated[Optional[Path], typer.Option(
    help="YAML of prices per model laid over the packaged table [env INSANDBOX_PRICES; see the README, 'Cost'].",
    rich_help_panel=M)]


Temperature = Annotated[Optional[float], typer.Option(help="Sampling temperature (default: the server's).",
                                                      rich_help_panel=M)]


MaxTokens = Annotated[Optional[int], typer.Option(help="Completion tokens per model call (default: the server's).",
                                                  rich_help_panel=M)]


ExtraBody = Annotated[Optional[str], typer.Option(
    help='JSON merged into every request, e.g. \'{"chat_template_kwargs": {"enable_thinking": true}}\'.',
    rich_help_panel=M)]


MaxRetries = Annotated[int, typer.Option(help="Retries of a failed model request (429, 5xx, timeouts, dropped "
                                              "connections, a body that is not a chat completion).",
                                         rich_help_panel=M)]


RequestTimeout = Annotated[float, typer.Option(help="Seconds one model request may take.", rich_help_panel=M)]


SendReasoning = Annotated[bool, typer.Option(help="Send the model's reasoning_content back with its turns "
                                                  "(for models that expect to see it).", rich_help_panel=M)]


ToolChoice = Annotated[str, typer.Option(help="tool_choice sent with the tools: auto, required, none, or omit "
                                              "(send none).", rich_help_panel=M)]


MaxSteps = Annotated[Optional[int], typer.Option(help="Model calls at most (default 100; bench: the task's).",
                                                 rich_help_panel=T)]


TokenBudget = Annotated[Optional[int], typer.Option(help="Stop after this many prompt+completion tokens.",
                                                    rich_help_panel=T)]


TimeLimit = Annotated[Optional[float], typer.Option(help="Stop after this many seconds (sandbox start included).",
                                                    rich_help_panel=T)]


StuckAfter = Annotated[int, typer.Option(help="Stop as `stuck` after the same tool calls with the same results "
                                              "this many times in a row (0: never).", rich_help_panel=T)]


PromptConfig = Annotated[Optional[Path], typer.Option(
    help="YAML with system_prompt and instance_prompt (bench: overrides the task's keys it sets).",
    rich_help_panel=T)]


Image = Annotated[str, typer.Option(help="Sandbox image (built on first use if it is insandbox:*).",
                                    rich_help_panel=S)]


CommandTimeout = Annotated[float, typer.Option(help="Seconds before a command is killed with everything it started.",
                                               rich_help_panel=S)]


OutputLimit = Annotated[int, typer.Option(help="Characters of a tool's output the model sees (head and tail).",
                                          rich_help_panel=S)]


Memory = Annotated[str, typer.Option(help="Sandbox memory limit, e.g. 512m, 4g ('none': no limit).",
                                     rich_help_panel=S)]


Cpus = Annotated[float, typer.Option(help="Sandbox CPU limit (0: no limit).", rich_help_panel=S)]


PidsLimit = Annotated[int, typer.Option(help="Sandbox process limit (0: no limit).", rich_help_panel=S)]


Network = Annotated[str, typer.Option(help="Sandbox network: bridge (full egress), none, registries (PyPI and "
                                           "Debian only, through a proxy), host (warned), or an existing Docker "
                                           "network.", rich_help_panel=S)]


Disk = Annotated[str, typer.Option(help="What a sandbox may write to its disk, e.g. 10g ('none': no limit; see the "
                                         "README, 'Security and reliability').", rich_help_panel=S)]


Runtime = Annotated[Optional[str], typer.Option(help="The engine's container runtime, e.g. runsc for gVisor "
                                                     "(default: the engine's own).", rich_help_panel=S)]


CapAdd = Annotated[Optional[list[str]], typer.Option("--cap-add", help="A capability the sandbox keeps beyond the "
                                                     "few apt-get and pip need, e.g. SYS_PTRACE (repeatable).",
                                                     rich_help_panel=S)]


EnvVars = Annotated[Optional[list[str]], typer.Option("--env", help="KEY=VALUE set in the sandbox (repeatable).",
                                                      rich_help_panel=S)]


MaxSandboxes = Annotated[Optional[int], typer.Option(
    help="Live sandboxes at most; more starts wait for one to close. Starts also wait while the host lacks "
         "memory, pids, open files or bridge ports [env INSANDBOX_MAX_SANDBOXES; default: no cap].",
    rich_help_panel=S)]


CopyFileLimit = Annotated[str, typer.Option(help="Copy-back: files bigger than this stay behind (recorded), e.g. "
                                                 "512m ('none': no limit).", rich_help_panel=S)]


CopyTotalLimit = Annotated[str, typer.Option(help="Copy-back: at most this much in all, e.g. 1g ('none': no limit).",
                                             rich_help_panel=S)]


CopyFilesLimit = Annotated[int, typer.Option(help="Copy-back: at most this many files (0: no limit).",
                                             rich_help_panel=S)]


def _shared_settings(*, provider, tool_format, stream, stall_timeout, logprobs, top_logprobs, thinking_budget,
                     prompt_caching,
                     model, base_url, api_key, gguf, prices, temperature, max_tokens, extra_body, max_retries,
                     request_timeout, send_reasoning, tool_choice, max_steps, token_budget, time_limit, stuck_after,
                     prompt_config, image, timeout_per_command, output_limit, memory, cpus, pids_limit, network, disk,
                     runtime, cap_add, env, max_output_file_size, max_output_size, max_output_files,
                     max_sandboxes) -> dict:
    """RunConfig fields from the shared options; BadArgument for what typer cannot check."""
    from ..core.units import parse_size

    if network == "host":
        _warn_host_network()

    body = _extra_body(extra_body)

    def size(flag: str, value: str) -> Optional[int]:
        if value.strip().lower() in ("none", ""):
            return None
        try:
            return parse_size(value)
        except ValueError as e:
            raise BadArgument(f"{flag}: {e}") from None

    if provider not in (None, "openai", "anthropic"):
        raise BadArgument(f"--provider {provider}: use openai or anthropic")
    if tool_format not in ("native", "text"):
        raise BadArgument(f"--tool-format {tool_format}: use native or text")
    out = dict(provider=provider, tool_format=tool_format, stream=stream, stall_timeout=stall_timeout,
               logprobs=logprobs,
               top_logprobs=top_logprobs, thinking_budget=thinking_budget, prompt_caching=prompt_caching,
               model=model, base_url=base_url, api_key=api_key, gguf=gguf, prices=prices,
               temperature=temperature,
               max_tokens=max_tokens, extra_body=body, max_retries=max_retries, request_timeout=request_timeout,
               send_reasoning=send_reasoning, tool_choice=None if tool_choice == "omit" else tool_choice,
               token_budget=token_budget, time_limit=time_limit, stuck_after=stuck_after or None,
               prompt_config=prompt_config, image=image, timeout_per_command=timeout_per_command,
               output_limit=output_limit, memory=None if memory.lower() in ("none", "0", "") else memory,
               cpus=cpus or None, pids_limit=pids_limit or None, network=network,
               disk=None if disk.lower() in ("none", "0", "") else disk, runtime=runtime or None,
               cap_add=list(cap_add or []), env=_parse_env(env or []),
               output_max_file_bytes=size("--max-output-file-size", max_output_file_size),
               output_max_bytes=size("--max-output-size", max_output_size),
               output_max_files=max_output_files or None, max_sandboxes=max_sandboxes)
    if max_steps is not None:
        out["max_steps"] = max_steps
    return out


SHARED = set(_shared_settings.__code__.co_varnames[:_shared_settings.__code__.co_kwonlyargcount])


def _extra_body(text: Optional[str]) -> Optional[dict]:
    try:
        body = json.loads(text) if text else None
    except ValueError as e:
        raise BadArgument(f"--extra-body is not valid JSON: {e}") from None
    if body is not None and not isinstance(body, dict):
        raise BadArgument("--extra-body must be a JSON object")
    return body


def _warn_host_network() -> None:
    """Documented, but easy to miss: said every time."""
    typer.echo("insandbox: warning: --network host gives the sandbox this machine's network: the model's code "
               "can reach every service listening on localhost here (the model server included) and every "
               "network this machine can reach", err=True)


def _sandbox_given(*, image, network, cap_add, runtime, memory, cpus, pids_limit, disk, max_output_file_size,
                   max_output_size, max_output_files) -> dict:
    """The sandbox options replay and fork were given, as RunConfig fields (absent: not given; a value of
    None: no limit), the same values as for run. Only these grant what a run folder asks beyond the
    defaults (replay/grants.py). BadArgument or ConfigError for a bad value."""
    from ..core.units import parse_size

    out = {k: v for k, v in (("image", image), ("network", network), ("cap_add", cap_add)) if v is not None}
    if runtime is not None:
        out["runtime"] = runtime or None
    for key, v in (("memory", memory), ("disk", disk)):
        if v is not None:
            out[key] = None if v.strip().lower() in ("none", "0", "") else v
    for key, v in (("cpus", cpus), ("pids_limit", pids_limit), ("output_max_files", max_output_files)):
        if v is not None:
            out[key] = v or None  # 0: no limit
    for key, flag, v in (("output_max_file_bytes", "--max-output-file-size", max_output_file_size),
                         ("output_max_bytes", "--max-output-size", max_output_size)):
        if v is not None:
            try:
                out[key] = None if v.strip().lower() in ("none", "") else parse_size(v)
            except ValueError as e:
                raise BadArgument(f"{flag}: {e}") from None
    checked = _validated(out)  # each value as run would check it (capability names normalised)
    return {k: getattr(checked, k) for k in out}


def _show_granted(granted: list[str]) -> None:
    """Once nothing is refused any more: what the command line gave beyond the defaults."""
    if "--network host" in granted:
        _warn_host_network()
    if granted:
        typer.echo(f"insandbox: granted from the command line: {', '.join(granted)}", err=True)


def _parse_env(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadArgument(f"--env wants KEY=VALUE, got {item!r}")
        env[key] = value
    return env


def _validated(settings: dict):
    from ..config import validated

    return validated(settings)


def _read_query(query: Optional[str], query_file: Optional[Path]) -> str:
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
