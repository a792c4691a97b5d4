"""The `insandbox` command.

Exit status: 0 the command did its work (a run that ended normally, whatever its exit
reason); 1 the model server, the sandbox or insandbox failed, or what it needs is missing (no
Docker engine, an optional extra not installed: one line on stderr that says so); 2 bad
arguments (one line on stderr, nothing created); 128+N after signal N.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Give a language model a computer: run it in a Docker sandbox with bash, an editor and submit.")
image_app = typer.Typer(no_args_is_help=True, help="Build and inspect the sandbox image.")
app.add_typer(image_app, name="image")


def _add_rl() -> None:
    from .rl.cli import app as rl_app

    app.add_typer(rl_app, name="rl")


_add_rl()


class BadArgument(Exception):
    """Exit 2 with this one line."""


def _fail(message: str, code: int = 2) -> None:
    from .console import escape_controls

    typer.echo(f"insandbox: {escape_controls(message)}", err=True)
    raise typer.Exit(code)


def _run_until_done(make: Callable[[], Any]) -> tuple[Any, Optional[int]]:
    """Run a coroutine; the first Ctrl-C/SIGTERM cancels it (the run cleans up and saves),
    a second one removes this process's sandboxes at once and exits."""
    from .sandbox import kill_all_now

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    main = loop.create_task(make())
    got: dict[str, int] = {}

    def on_signal(sig: int) -> None:
        if "sig" not in got:
            got["sig"] = sig
            typer.echo(f"\ninsandbox: {signal.Signals(sig).name}: stopping, saving the run and removing the "
                       "sandbox (again to force)", err=True)
            main.cancel()
        else:
            kill_all_now()
            os._exit(128 + sig)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        return loop.run_until_complete(main), None
    except asyncio.CancelledError:
        return None, got.get("sig", signal.SIGINT)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()



def _finish(make: Callable[[], Any], bad: tuple[type[BaseException], ...] = (),
            failed: tuple[type[BaseException], ...] = ()) -> Any:
    """Run a command's coroutine to its end (`_run_until_done`): its ConfigError and `bad` exceptions
    exit 2, SandboxError and `failed` ones exit 1, a signal 128+N; else its result."""
    from .config import ConfigError
    from .sandbox import SandboxError

    try:
        result, sig = _run_until_done(make)
    except (ConfigError, *bad) as e:
        _fail(str(e))
    except (SandboxError, *failed) as e:
        _fail(str(e), 1)
    if sig is not None:
        raise typer.Exit(128 + sig)
    return result

# ---------------------------------------------------------------------- options run and bench share
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
    from .config import parse_size

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
    from .config import parse_size

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
    from .config import validated

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


# ---------------------------------------------------------------------- run
@app.command()
def run(
    query: Annotated[Optional[str], typer.Argument(help="The task. '-' reads it from stdin.")] = None,
    query_file: Annotated[Optional[Path], typer.Option(help="Read the task from this file.")] = None,
    mode: Annotated[str, typer.Option(help="sandbox: tools in a container; llm: one plain completion.")] = "sandbox",
    input_dir: Annotated[Optional[Path], typer.Option(help="Host folder copied to the sandbox's input folder.")] = None,
    output_dir: Annotated[Optional[Path], typer.Option(help="Run folder (default runs/<timestamp>-<id>).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No step-by-step view.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary on stdout (the view goes to "
                                                          "stderr).")] = False,
    model: Model = None, base_url: BaseUrl = None, api_key: ApiKey = None, gguf: Gguf = None, prices: Prices = None,
    provider: Provider = None, tool_format: ToolFormat = "native", stream: Stream = False,
    stall_timeout: StallTimeout = 120.0,
    logprobs: Logprobs = False, top_logprobs: TopLogprobs = 0, thinking_budget: ThinkingBudget = None,
    prompt_caching: PromptCaching = True,
    temperature: Temperature = None, max_tokens: MaxTokens = None, extra_body: ExtraBody = None,
    max_retries: MaxRetries = 5, request_timeout: RequestTimeout = 600.0, send_reasoning: SendReasoning = False,
    tool_choice: ToolChoice = "auto", max_steps: MaxSteps = None, token_budget: TokenBudget = None,
    time_limit: TimeLimit = None, stuck_after: StuckAfter = 5, prompt_config: PromptConfig = None,
    image: Image = "insandbox:latest", timeout_per_command: CommandTimeout = 120.0, output_limit: OutputLimit = 16000,
    memory: Memory = "4g", cpus: Cpus = 2.0, pids_limit: PidsLimit = 1024, network: Network = "bridge",
    disk: Disk = "10g", runtime: Runtime = None, cap_add: CapAdd = None, env: EnvVars = None,
    max_output_file_size: CopyFileLimit = "512m", max_output_size: CopyTotalLimit = "1g",
    max_output_files: CopyFilesLimit = 10_000, max_sandboxes: MaxSandboxes = None,
) -> None:
    """Run one task: the model works in a fresh sandbox until it submits."""
    from .config import ConfigError
    from .console import RichView, make_console
    from .runs.session import arun

    shared = {k: v for k, v in locals().items() if k in SHARED}
    try:
        text = _read_query(query, query_file)
        if mode not in ("sandbox", "llm"):
            raise BadArgument("--mode is sandbox or llm")
        settings = dict(_shared_settings(**shared), mode=mode, input_dir=input_dir, output_dir=output_dir)
        cfg = _validated(settings)
    except (BadArgument, ConfigError) as e:
        _fail(str(e))
    view = RichView(make_console(stderr=json_out), show_steps=not quiet, max_steps=cfg.max_steps)
    result = _finish(lambda: arun(text, cfg, observer=view))
    if json_out:
        t = result.trajectory
        typer.echo(json.dumps({"run_dir": str(result.run_dir), "exit_reason": t.exit_reason,
                               "exit_detail": t.exit_detail, "answer": result.answer, "files": result.files,
                               "skipped": [s.model_dump() for s in t.output_skipped],
                               "totals": t.totals.model_dump(),
                               "price": t.price.model_dump() if t.price else None}, ensure_ascii=False))
    if result.exit_reason is None or result.exit_reason.is_failure:
        raise typer.Exit(1)


# ---------------------------------------------------------------------- bench
@app.command()
def bench(
    task: Annotated[Optional[str], typer.Argument(help="A built-in task (math, physics, chem, biomed, long_context, "
                                                       "instruct_follow) or a task YAML file.")] = None,
    data: Annotated[Optional[Path], typer.Option(help="Local JSON/JSONL rows instead of the hub dataset.")] = None,
    mode: Annotated[str, typer.Option(help="sandbox, llm or both (both runs the same items in both "
                                           "modes).")] = "sandbox",
    repeats: Annotated[Optional[int], typer.Option(help="Samples per item and mode (default: the task's).")] = None,
    limit: Annotated[Optional[int], typer.Option(help="Only the first N rows.")] = None,
    ids: Annotated[Optional[str], typer.Option(help="Only these row ids (comma-separated).")] = None,
    concurrency: Annotated[Optional[int], typer.Option(help="Samples in flight at once, each in its own sandbox "
                                                            "[default: 8; with --resume: the run's own].")] = None,
    retries: Annotated[int, typer.Option(help="Retries of a sample whose model server or sandbox failed.")] = 2,
    output_dir: Annotated[Optional[Path], typer.Option(help="Run folder (default "
                                                            "runs/bench-<task>-<timestamp>).")] = None,
    resume: Annotated[Optional[Path], typer.Option(help="Finish this earlier run with its own settings (done "
                                                        "samples are kept; --concurrency may change).")] = None,
    judge_model: Annotated[Optional[str], typer.Option(help="LLM judge for physics and long_context (else an "
                                                            "offline, labelled approximation).")] = None,
    judge_base_url: Annotated[Optional[str], typer.Option(help="The judge's endpoint (default: the "
                                                               "model's).")] = None,
    judge_api_key: Annotated[Optional[str], typer.Option(help="The judge's API key (default: the model's).")] = None,
    judge_prompt: Annotated[Optional[Path], typer.Option(help="Judge prompt file with {question}, {ground_truth}, "
                                                              "{answer}.")] = None,
    list_tasks: Annotated[bool, typer.Option("--list", help="List the built-in tasks and exit.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    pool: Annotated[bool, typer.Option(
        help="Samples take started sandboxes from a pool, started ahead while samples run (--no-pool: each "
             "sample starts and removes its own).", rich_help_panel="Sandbox pool")] = True,
    recycle: Annotated[bool, typer.Option(
        help="The pool recycles a sandbox between samples: every process killed, the filesystem restored to "
             "the image's, a fresh shell (needs a local engine and root; else fresh sandboxes).",
        rich_help_panel="Sandbox pool")] = True,
    pool_size: Annotated[Optional[int], typer.Option(
        help="Sandboxes alive at most, in use or waiting [default: concurrency + min(concurrency, 8)].",
        rich_help_panel="Sandbox pool")] = None,
    max_uses: Annotated[int, typer.Option(
        help="Samples one recycled sandbox serves before a fresh one replaces it.",
        rich_help_panel="Sandbox pool")] = 100,
    ray: Annotated[Optional[str], typer.Option("--ray", help="Run the samples on a Ray cluster: auto (the one "
                                                             "started on this machine) or its ADDRESS "
                                                             "(host:port). Needs insandbox[ray].")] = None,
    model: Model = None, base_url: BaseUrl = None, api_key: ApiKey = None, gguf: Gguf = None, prices: Prices = None,
    provider: Provider = None, tool_format: ToolFormat = "native", stream: Stream = False,
    stall_timeout: StallTimeout = 120.0,
    logprobs: Logprobs = False, top_logprobs: TopLogprobs = 0, thinking_budget: ThinkingBudget = None,
    prompt_caching: PromptCaching = True,
    temperature: Temperature = None, max_tokens: MaxTokens = None, extra_body: ExtraBody = None,
    max_retries: MaxRetries = 5, request_timeout: RequestTimeout = 600.0, send_reasoning: SendReasoning = False,
    tool_choice: ToolChoice = "auto", max_steps: MaxSteps = None, token_budget: TokenBudget = None,
    time_limit: TimeLimit = None, stuck_after: StuckAfter = 5, prompt_config: PromptConfig = None,
    image: Image = "insandbox:latest", timeout_per_command: CommandTimeout = 120.0, output_limit: OutputLimit = 16000,
    memory: Memory = "4g", cpus: Cpus = 2.0, pids_limit: PidsLimit = 1024, network: Network = "bridge",
    disk: Disk = "10g", runtime: Runtime = None, cap_add: CapAdd = None, env: EnvVars = None,
    max_output_file_size: CopyFileLimit = "512m", max_output_size: CopyTotalLimit = "1g",
    max_output_files: CopyFilesLimit = 10_000, max_sandboxes: MaxSandboxes = None,
) -> None:
    """Benchmark a model on a task, in sandbox mode, plain mode or both."""
    from .bench.data import DataError
    from .bench.progress import RichBenchProgress
    from .bench.report import rich_tables, write_report
    from .bench.runner import BenchAborted, BenchConfig, run_bench
    from .bench.tasks import builtin_tasks, load_task
    from .config import ConfigError
    from .console import make_console, shown

    console = make_console()
    if list_tasks:
        for name in builtin_tasks():
            spec = load_task(name)
            typer.echo(f"{name:<16} repeats {spec.repeats:<3} scorer {spec.scorer:<8} {spec.description}")
        return
    shared = {k: v for k, v in locals().items() if k in SHARED}
    try:
        if resume is None and not task:
            raise BadArgument("name a task (insandbox bench --list), or --resume RUN_DIR")
        if mode not in ("sandbox", "llm", "both"):
            raise BadArgument("--mode is sandbox, llm or both")
        run_cfg = _validated(_shared_settings(**shared))
        cfg = BenchConfig(task=task or "resume", data=data, mode=mode, repeats=repeats, limit=limit,
                          ids=[i.strip() for i in ids.split(",") if i.strip()] if ids else None,
                          concurrency=8 if concurrency is None else concurrency, retries=retries,
                          output_dir=output_dir, judge_model=judge_model,
                          judge_base_url=judge_base_url or base_url, judge_api_key=judge_api_key,
                          judge_prompt=judge_prompt, pool=pool, recycle=recycle, pool_size=pool_size,
                          max_uses=max_uses, run=run_cfg)
    except (BadArgument, ConfigError) as e:
        _fail(str(e))
    except ValueError as e:  # pydantic, for the benchmark's own settings
        from pydantic import ValidationError

        from .config import describe
        _fail(describe(e) if isinstance(e, ValidationError) else str(e))
    progress = RichBenchProgress(console, label=(Path(task).stem if task else "resume"))
    if quiet:
        from .bench.runner import _Quiet
        progress = _Quiet()
    try:
        result = _finish(lambda: run_bench(cfg, progress, resume=resume,
                                           concurrency=concurrency if resume else None, ray=ray),
                         bad=(DataError, ValueError, FileNotFoundError), failed=(BenchAborted,))
    finally:
        if hasattr(progress, "close"):
            progress.close()
    out, report = write_report([result.run_dir], plots=False)
    for table in rich_tables(report):
        console.print(table)
    console.print(shown(f"results: {result.run_dir / 'results.jsonl'}  summary: {result.run_dir / 'summary.json'}  "
                        f"report: insandbox report {result.run_dir}  view: insandbox view {result.run_dir}"))


# ---------------------------------------------------------------------- the rest
@app.command()
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="Benchmark run folders (several: compared side by side).")],
    out: Annotated[Optional[Path], typer.Option(help="Where to write report.md, report.html and the figures (default: "
                                                     "<first run>/report).")] = None,
    plots: Annotated[bool, typer.Option(help="Draw the PNG figures.")] = True,
    pool: Annotated[bool, typer.Option("--pool", help="Pool the runs of the same task and model into one (refused "
                                                      "when their settings differ).")] = False,
) -> None:
    """Accuracy with confidence intervals, sandbox vs plain, capability usage, tokens, cost and time."""
    from .bench.report import rich_tables, write_report
    from .console import make_console, shown

    try:
        out_dir, data = write_report(run_dirs, out, plots=plots, pool=pool)
    except ValueError as e:
        _fail(str(e))
    console = make_console()
    for table in rich_tables(data):
        console.print(table)
    console.print(shown(f"report: {out_dir / 'report.md'}, {out_dir / 'report.html'}"))


@app.command()
def replay(
    run_dir: Annotated[Path, typer.Argument(help="A run folder, or a benchmark sample's samples/<mode>/<id>/r<k>.")],
    until: Annotated[Optional[int], typer.Option(help="Replay steps 1..K only.")] = None,
    ignore: Annotated[Optional[list[str]], typer.Option(
        "--ignore", help="A regular expression whose matches are replaced by <ignored> in both observations "
                         "before comparing, e.g. for timings or PIDs (repeatable).")] = None,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the report (every diff) to this "
                                                                     "file.")] = None,
    input_dir: Annotated[Optional[Path], typer.Option(help="Take the input files from this folder instead of the "
                                                           "recorded ones.")] = None,
    image: Annotated[Optional[str], typer.Option(help="Replay in this image instead of the recorded one.",
                                                 rich_help_panel=S)] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the summary line.")] = False,
    network: Network = None, cap_add: CapAdd = None, runtime: Runtime = None, memory: Memory = None,
    cpus: Cpus = None, pids_limit: PidsLimit = None, disk: Disk = None, max_output_file_size: CopyFileLimit = None,
    max_output_size: CopyTotalLimit = None, max_output_files: CopyFilesLimit = None,
) -> None:
    """Run a recorded trajectory's tool calls again in a fresh sandbox and report, call by call, where the
    observations differ. The sandbox options replace the recorded settings; a recorded setting beyond
    run's defaults (another network, capabilities, a runtime or image, looser limits) is refused unless
    given here. Exit status 0 when the replay ran, whatever it found; 1 when the sandbox failed; 2 for bad
    arguments (no trajectory, input files gone, a bad --ignore, a run folder asking for what it may not)."""
    from .config import ConfigError
    from .console import make_console
    from .replay.inputs import InputsMissing
    from .replay.replayer import Replayer, ReplayError, load_recorded
    from .replay.report import print_report, write_json
    from .replay.safe_files import UnsafeRunFolder
    from .runs.session import prepare_sandbox

    if until is not None and until < 1:
        _fail("--until: give a step number from 1")
    try:
        given = _sandbox_given(image=image, network=network, cap_add=cap_add, runtime=runtime, memory=memory,
                               cpus=cpus, pids_limit=pids_limit, disk=disk, max_output_file_size=max_output_file_size,
                               max_output_size=max_output_size, max_output_files=max_output_files)
        recorded = load_recorded(run_dir, given=given)
        replayer = Replayer(recorded, ignore or [], input_dir)
    except (BadArgument, ConfigError, ReplayError, InputsMissing, UnsafeRunFolder) as e:
        _fail(str(e))
    _show_granted(recorded.granted)

    async def go():
        await prepare_sandbox(recorded.settings)
        try:
            return await replayer.replay(until)
        finally:
            await replayer.close()

    report = _finish(go)
    console = make_console()
    if quiet:
        first = report.first_divergence
        typer.echo(f"{report.steps_replayed} steps, {report.calls} calls: {report.identical} identical, "
                   f"{report.differing} differ; first divergence: "
                   + (f"step {first['step']}, call {first['call']}" if first else "none"))
    else:
        print_report(report, console)
    if json_path is not None:
        write_json(report, json_path)
    if report.stopped:
        raise typer.Exit(1)


@app.command()
def fork(
    run_dir: Annotated[Path, typer.Argument(help="A run folder, or a benchmark sample's samples/<mode>/<id>/r<k>.")],
    step: Annotated[int, typer.Option(help="Fork after this step (0: before the first).")],
    n: Annotated[int, typer.Option("--n", help="Branches, each in a sandbox of its own.")] = 2,
    prompt_append: Annotated[Optional[str], typer.Option(help="A user message added after step K's results.")] = None,
    query_file: Annotated[Optional[Path], typer.Option(help="Replace the task's text in the first user message with "
                                                            "this file's.")] = None,
    output_dir: Annotated[Optional[Path], typer.Option(help="Where the branch-<i> folders go (default "
                                                            "RUN_DIR/forks/step-K).")] = None,
    ignore: Annotated[Optional[list[str]], typer.Option("--ignore", help="As for replay: masked when comparing the "
                                                        "replayed steps with the recorded ones.")] = None,
    input_dir: Annotated[Optional[Path], typer.Option(help="Take the input files from this folder instead of the "
                                                           "recorded ones.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No line per branch step.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary on stdout.")] = False,
    model: Model = None, base_url: BaseUrl = None, api_key: ApiKey = None, provider: Provider = None,
    gguf: Gguf = None, tool_format: Annotated[Optional[str], typer.Option(help="native or text (default: as "
                                                                               "recorded).")] = None,
    temperature: Temperature = None, max_tokens: MaxTokens = None, max_steps: MaxSteps = None,
    extra_body: ExtraBody = None,
    image: Image = None, network: Network = None, cap_add: CapAdd = None, runtime: Runtime = None,
    memory: Memory = None, cpus: Cpus = None, pids_limit: PidsLimit = None, disk: Disk = None,
    max_output_file_size: CopyFileLimit = None, max_output_size: CopyTotalLimit = None,
    max_output_files: CopyFilesLimit = None,
) -> None:
    """Replay a run's steps 1..K, snapshot the sandbox, and let N branches continue the conversation from
    there with the given model or prompt, each in its own sandbox and run folder. The recorded model server
    is used only when it is on this machine (else pass --base-url); the sandbox options are as for replay.
    Exit status 0 when every branch ended on the model's terms or a limit; 1 when a branch, the model server
    or the sandbox failed; 2 for bad arguments (and a run folder asking for what it may not)."""
    from .config import ConfigError
    from .console import make_console, shown
    from .replay.fork import fork_run
    from .replay.inputs import InputsMissing
    from .replay.replayer import ReplayError
    from .replay.safe_files import UnsafeRunFolder

    if tool_format not in (None, "native", "text"):
        _fail(f"--tool-format {tool_format}: use native or text")
    if provider not in (None, "openai", "anthropic"):
        _fail(f"--provider {provider}: use openai or anthropic")
    query = None
    try:
        body = _extra_body(extra_body)
        if query_file is not None:
            query = _read_query(None, query_file)
        given = _sandbox_given(image=image, network=network, cap_add=cap_add, runtime=runtime, memory=memory,
                               cpus=cpus, pids_limit=pids_limit, disk=disk, max_output_file_size=max_output_file_size,
                               max_output_size=max_output_size, max_output_files=max_output_files)
    except (BadArgument, ConfigError) as e:
        _fail(str(e))
    overrides = dict(model=model, base_url=base_url, api_key=api_key, provider=provider, gguf=gguf,
                     tool_format=tool_format, temperature=temperature, max_tokens=max_tokens, max_steps=max_steps,
                     extra_body=body)
    console = make_console(stderr=json_out)

    def on_step(i: int, s) -> None:
        if not quiet:
            calls = ", ".join(c.name for c in s.tool_calls) or "no call"
            console.print(f"branch {i} step {s.index}: {shown(calls)}")

    result = _finish(lambda: fork_run(run_dir, step, n, overrides, prompt_append=prompt_append, query=query,
                                      output_dir=output_dir, ignore=tuple(ignore or ()), input_dir=input_dir,
                                      sandbox=given, on_granted=_show_granted, on_step=on_step),
                     bad=(ReplayError, InputsMissing, UnsafeRunFolder))
    _print_fork(result, console, json_out)
    if any(b.exit_reason is None or b.exit_reason.is_failure for b in result.branches):
        raise typer.Exit(1)


def _print_fork(result, console, json_out: bool) -> None:
    from rich.table import Table

    from .console import shown

    rep = result.replay
    if rep.differing:
        first = rep.first_divergence
        console.print(f"[yellow]note: the replay of steps 1..{rep.steps_replayed} differed from the recording "
                      f"({rep.differing} calls, first at step {first['step']}): the branches start from the "
                      "replayed state[/yellow]")
    table = Table(title=f"{len(result.branches)} branches after step {rep.steps_replayed}", title_justify="left")
    for col in ("branch", "exit reason", "steps after the fork", "answer", "files", "run folder"):
        table.add_column(col)
    rows = []
    for i, b in enumerate(result.branches, 1):
        t = b.trajectory
        own = len(t.steps) - rep.steps_replayed
        answer = (b.answer or "").strip().replace("\n", " ")
        rows.append({"branch": i, "run_dir": str(b.run_dir), "exit_reason": t.exit_reason, "steps": own,
                     "answer": b.answer, "files": t.output_files, "exit_detail": t.exit_detail})
        table.add_row(str(i), str(t.exit_reason), str(own), shown(answer[:40] + ("..." if len(answer) > 40 else "")),
                      str(len(t.output_files)), shown(str(b.run_dir)))
    console.print(table)
    t = result.timings
    console.print(f"replay {t.get('replay_s', 0):.2f} s; fork {t.get('fork_s', 0):.2f} s (shell state "
                  f"{t.get('shell_s', 0):.2f} s, commit {t.get('commit_s', 0):.2f} s, then {len(result.branches)} "
                  "copies started)")
    if json_out:
        typer.echo(json.dumps({"branches": rows, "timings": t, "replay": {
            k: v for k, v in rep.to_dict().items() if k != "comparisons"}}, ensure_ascii=False, default=str))


@image_app.command("build")
def image_build(
    tag: Annotated[str, typer.Option(help="Image tag to build.")] = "insandbox:latest",
    base: Annotated[Optional[str], typer.Option(help="Base image (default: debian:bookworm-slim, or a debootstrapped "
                                                     "Debian where no registry is reachable).")] = None,
    no_cache: Annotated[bool, typer.Option(help="Rebuild every layer.")] = False,
    ca_cert: Annotated[Optional[list[Path]], typer.Option(help="Extra CA certificate to trust in the image "
                                                               "(repeatable; the host's /usr/local/share/"
                                                               "ca-certificates are always added).")] = None,
) -> None:
    """Build the sandbox image from the Dockerfile shipped with insandbox."""
    from rich.console import Console

    from .sandbox import SandboxError
    from .sandbox.docker.image import build_image

    console = Console(highlight=False)
    try:
        with console.status("building", spinner="dots") as status:
            info = build_image(tag, base=base, no_cache=no_cache, extra_ca=ca_cert or [],
                               progress=lambda line: status.update(line[:120]))
    except SandboxError as e:
        _fail(str(e), 1)
    console.print(f"built [bold]{info.tag}[/bold] on {info.base}: {info.size_bytes / 1e6:,.0f} MB ({info.id[:19]})")


@image_app.command("build-proxy")
def image_build_proxy(
    no_cache: Annotated[bool, typer.Option(help="Rebuild every layer.")] = False,
) -> None:
    """Build the image of the allow-list proxy of --network registries (otherwise built on first use)."""
    from rich.console import Console

    from .sandbox import SandboxError
    from .sandbox.docker.image import image_info
    from .sandbox.docker.proxy import allowed_endpoints, build_image

    console = Console(highlight=False)
    try:
        with console.status("building", spinner="dots") as status:
            tag = build_image(no_cache=no_cache, progress=lambda line: status.update(line[:120]))
        info = image_info(tag)
        allowed = ", ".join(map(str, allowed_endpoints()))
    except (SandboxError, ValueError) as e:
        _fail(str(e), 1)
    console.print(f"built [bold]{info.tag}[/bold]: {info.size_bytes / 1e6:,.0f} MB ({info.id[:19]}); "
                  f"its proxy will let through {allowed}")


@image_app.command("status")
def image_status(tag: Annotated[str, typer.Option(help="Image tag to look at.")] = "insandbox:latest") -> None:
    """Say whether the image exists and how big it is."""
    from .sandbox import SandboxError
    from .sandbox.docker.image import image_exists, image_info

    try:
        if not image_exists(tag):
            _fail(f"{tag} does not exist; build it with `insandbox image build`", 1)
        info = image_info(tag)
    except SandboxError as e:  # no engine: one line, like every other command
        _fail(str(e), 1)
    typer.echo(f"{info.tag}: {info.size_bytes / 1e6:,.0f} MB ({info.id[:19]})")


@app.command()
def clean(
    all_: Annotated[bool, typer.Option("--all", help="Also remove sandboxes whose owner process is alive (or "
                                                     "unknown): only when no run is in progress.")] = False,
    dry_run: Annotated[bool, typer.Option(help="Only list what would be removed.")] = False,
    backend: Annotated[str, typer.Option(help="Sandbox backend.")] = "docker",
) -> None:
    """Remove sandboxes left behind by processes that are gone (only sandboxes insandbox created)."""
    from .sandbox import SandboxError, SetupError, backend_class

    try:
        removed = backend_class(backend).clean(everything=all_, dry_run=dry_run)
    except SetupError as e:
        _fail(str(e))
    except SandboxError as e:
        _fail(str(e), 1)
    for c in removed:
        typer.echo(f"{'would remove' if dry_run else 'removed'} {c.name} (run {c.run_id or '?'}; {c.reason})")
    if not removed:
        typer.echo("nothing to clean")


@app.command()
def view(
    path: Annotated[Path, typer.Argument(help="A run folder, a benchmark folder, or a folder of many.")] = Path("runs"),
    host: Annotated[str, typer.Option(help="Address to listen on (anything but loopback lets others on the network "
                                           "read every run).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free one).")] = 8765,
    open_browser: Annotated[bool, typer.Option("--open/--no-open", help="Open the viewer in a browser.")] = True,
) -> None:
    """A local web viewer for runs, benchmarks and the files they produced, updated live while they run."""
    from .viewer.app import CannotListen, is_loopback, serve

    if not path.is_dir():
        _fail(f"{path} is not a folder (give a run folder, a benchmark folder, or a folder of them)")
    if not 0 <= port <= 65535:
        _fail(f"--port {port}: give a port from 0 to 65535")
    if not is_loopback(host):
        typer.echo(f"insandbox: warning: listening on {host}: anyone who can reach this address can read every run "
                   f"and file under {path}", err=True)
    try:
        serve(path, host=host, port=port, open_browser=open_browser,
              on_ready=lambda url: typer.echo(f"insandbox view: {url} (showing {path.resolve()}; Ctrl-C to stop)"))
    except CannotListen as e:
        _fail(str(e))
    except KeyboardInterrupt:
        pass


@app.command("serve-model")
def serve_model(
    gguf: Annotated[Optional[Path], typer.Option(help="GGUF model file (default: the embedded "
                                                      "SmolLM2-135M-Instruct).")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    n_ctx: Annotated[Optional[int], typer.Option(help="Context window (default: the model's, at most "
                                                      "16384).")] = None,
) -> None:
    """Serve a local GGUF model (OpenAI-compatible, tool calls constrained to the tool schemas),
    so several runs or a benchmark can share one loaded model."""
    from .models.local_server import LocalModelMissing, serve

    typer.echo(f"serving on http://{host}:{port}/v1 (Ctrl-C to stop)", err=True)
    try:
        serve(gguf, host=host, port=port, n_ctx=n_ctx)
    except LocalModelMissing as e:
        _fail(str(e))
    except KeyboardInterrupt:
        pass


@app.command("scripted-server")
def scripted_server(
    script: Annotated[Path, typer.Argument(help="JSON or YAML script (see insandbox.models.scripted_server).")],
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8011,
    latency: Annotated[Optional[float], typer.Option(help="Seconds to wait before each answer.")] = None,
) -> None:
    """Serve a deterministic scripted model (OpenAI-compatible) for tests and demos."""
    from .models.scripted_server import ScriptedServer

    srv = ScriptedServer(script, host=host, port=port, latency=latency, keep_requests=False)
    typer.echo(f"scripted model server on {srv.url}", err=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


def _click_exceptions():
    """Click's exception classes: typer vendors its own click from 0.2x on, older ones use click."""
    try:
        from typer._click import exceptions
    except ImportError:  # pragma: no cover - older typer
        from click import exceptions
    return exceptions


def _command_of(argv: list[str]) -> str:
    """The command as typed, for messages: 'report', 'rl export', 'image status'."""
    words = []
    for arg in argv:
        if arg.startswith("-") or len(words) == (2 if words and words[0] in ("rl", "image") else 1):
            break
        words.append(arg)
    return " ".join(words)


def _missing_need(e: BaseException, command: str) -> Optional[str]:
    """The one line for a failure that is no bug but something this machine lacks: the sandbox engine
    (a SandboxError, also as the cause of another error) or an optional extra; None for anything else."""
    from .extras import MissingExtra, install_hint
    from .sandbox import SandboxError

    seen = e
    while seen is not None:
        if isinstance(seen, SandboxError):
            return str(seen)
        seen = seen.__cause__
    if isinstance(e, MissingExtra):
        return str(e)
    if isinstance(e, ModuleNotFoundError) and e.name:
        return install_hint(e.name, command)
    return None


def main() -> None:
    """Console entry point. Usage errors are one line and exit 2; a missing engine or extra is one
    line and exit 1. Once the command is done (everything saved, the sandbox gone) the process
    leaves with os._exit: the interpreter's own shutdown, tearing down openai, pydantic and the
    Docker SDK, would add ~0.3 s to every run for nothing."""
    for stream in (sys.stdout, sys.stderr):  # text no encoding can write (a lone surrogate) is written out
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError):
            pass
    exc = _click_exceptions()
    try:
        code = app(standalone_mode=False)
        code = code if isinstance(code, int) else 0
    except exc.NoArgsIsHelpError as e:  # `insandbox` alone: the help, as asked
        typer.echo(e.ctx.get_help() if e.ctx else e.format_message())
        code = 0
    except exc.UsageError as e:
        path = e.ctx.command_path if e.ctx else "insandbox"
        typer.echo(f"insandbox: {e.format_message()} (see {path} --help)", err=True)
        code = 2
    except typer.Abort:
        code = 130
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception as e:
        line = _missing_need(e, _command_of(sys.argv[1:]))
        if line is None:
            raise  # a bug: its traceback is what a report needs
        from .console import escape_controls

        typer.echo(f"insandbox: {escape_controls(line)}", err=True)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
