"""The `insandbox` command."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Give a language model a computer: run it in a Docker sandbox with bash, an editor and submit.")
image_app = typer.Typer(no_args_is_help=True, help="Build and inspect the sandbox image.")
app.add_typer(image_app, name="image")

ERROR_REASONS = ("model_error", "sandbox_error")


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"insandbox: {message}", err=True)
    raise typer.Exit(code)


def _run_until_done(make: Callable[[], Any]) -> tuple[Any, Optional[int]]:
    """Run a coroutine; the first Ctrl-C/SIGTERM cancels it (the run cleans up and saves),
    a second one removes this process's containers at once and exits."""
    from .sandbox.docker import remove_live_now

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
            remove_live_now()
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


def _parse_env(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--env wants KEY=VALUE, got {item!r}")
        env[key] = value
    return env


@app.command()
def run(
    query: Optional[str] = typer.Argument(None, help="The task. '-' reads it from stdin."),
    query_file: Optional[Path] = typer.Option(None, help="Read the task from this file."),
    model: Optional[str] = typer.Option(None, help="Model name [env INSANDBOX_MODEL; default: the server's first "
                                                                 "model]."),
    base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 "
                                                      "[env INSANDBOX_BASE_URL]."),
    api_key: Optional[str] = typer.Option(None, help="API key [env INSANDBOX_API_KEY, then OPENAI_API_KEY]."),
    gguf: Optional[Path] = typer.Option(None, help="Serve this local GGUF model for the run (the default when no "
                                                   "model is configured: the embedded SmolLM2-135M)."),
    mode: str = typer.Option("sandbox", help="sandbox: tools in a container; llm: one plain completion."),
    max_steps: int = typer.Option(100, help="Model calls at most."),
    temperature: Optional[float] = typer.Option(None, help="Sampling temperature (default: the server's)."),
    max_tokens: Optional[int] = typer.Option(None, help="Completion tokens per call (default: the server's)."),
    extra_body: Optional[str] = typer.Option(None, help='JSON merged into each request, e.g. '
                                                        '\'{"chat_template_kwargs": {"enable_thinking": true}}\'.'),
    prompt_config: Optional[Path] = typer.Option(None, help="YAML with system_prompt and instance_prompt."),
    input_dir: Optional[Path] = typer.Option(None, help="Host folder copied to the sandbox's input folder."),
    output_dir: Optional[Path] = typer.Option(None, help="Run folder (default runs/<timestamp>-<id>)."),
    image: str = typer.Option("insandbox:latest", help="Sandbox image (built on first use if it is insandbox:*)."),
    timeout_per_command: float = typer.Option(120.0, help="Seconds before a command is killed."),
    token_budget: Optional[int] = typer.Option(None, help="Stop after this many prompt+completion tokens."),
    time_limit: Optional[float] = typer.Option(None, help="Stop after this many seconds."),
    memory: str = typer.Option("4g", help="Sandbox memory limit ('none': no limit)."),
    cpus: float = typer.Option(2.0, help="Sandbox CPU limit (0: no limit)."),
    pids_limit: int = typer.Option(1024, help="Sandbox process limit (0: no limit)."),
    network: str = typer.Option("bridge", help="Sandbox network: bridge, none or host."),
    env: list[str] = typer.Option([], "--env", help="KEY=VALUE set in the sandbox (repeatable)."),
    output_limit: int = typer.Option(16000, help="Characters of a tool's output the model sees (head + tail)."),
    max_retries: int = typer.Option(5, help="Retries of a failed model request (429, 5xx, timeouts)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No step-by-step view."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON summary on stdout (the view goes to stderr)."),
) -> None:
    """Run one task: the model works in a fresh sandbox until it submits."""

    from .config import ConfigError
    from .console import RichView, make_console
    from .runner import arun
    from .sandbox.base import SandboxError

    if query_file is not None:
        query = query_file.read_text(encoding="utf-8")
    elif query == "-":
        query = sys.stdin.read()
    if not query or not query.strip():
        _fail("no task given: insandbox run \"your task\"")
    try:
        body = json.loads(extra_body) if extra_body else None
    except ValueError as e:
        _fail(f"--extra-body is not valid JSON: {e}")
    if mode not in ("sandbox", "llm"):
        _fail("--mode is sandbox or llm")
    settings = dict(model=model, base_url=base_url, api_key=api_key, gguf=gguf, mode=mode, max_steps=max_steps,
                    temperature=temperature, max_tokens=max_tokens, extra_body=body, prompt_config=prompt_config,
                    input_dir=input_dir, output_dir=output_dir, image=image, timeout_per_command=timeout_per_command,
                    token_budget=token_budget, time_limit=time_limit,
                    memory=None if memory.lower() in ("none", "0", "") else memory, cpus=cpus or None,
                    pids_limit=pids_limit or None, network=network, env=_parse_env(env), output_limit=output_limit,
                    max_retries=max_retries)
    view = RichView(make_console(stderr=json_out), show_steps=not quiet, max_steps=max_steps)
    try:
        result, sig = _run_until_done(lambda: arun(query, observer=view, **settings))
    except (ConfigError, FileNotFoundError) as e:
        _fail(str(e))
    except SandboxError as e:
        _fail(str(e), 1)
    if sig is not None:
        raise typer.Exit(128 + sig)
    if json_out:
        t = result.trajectory
        typer.echo(json.dumps({"run_dir": str(result.run_dir), "exit_reason": t.exit_reason,
                               "exit_detail": t.exit_detail, "answer": result.answer, "files": result.files,
                               "totals": t.totals.model_dump()}, ensure_ascii=False))
    if result.exit_reason in ERROR_REASONS:
        raise typer.Exit(1)


@app.command()
def bench(
    task: Optional[str] = typer.Argument(None, help="A built-in task (math, physics, chem, biomed, long_context, "
                                                    "instruct_follow) or a task YAML file."),
    model: Optional[str] = typer.Option(None, help="Model name [env INSANDBOX_MODEL]."),
    base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint [env INSANDBOX_BASE_URL]."),
    api_key: Optional[str] = typer.Option(None, help="API key [env INSANDBOX_API_KEY, then OPENAI_API_KEY]."),
    gguf: Optional[Path] = typer.Option(None, help="Serve this local GGUF model (default with no model: the "
                                                   "embedded one)."),
    data: Optional[Path] = typer.Option(None, help="Local JSON/JSONL rows instead of the hub dataset."),
    mode: str = typer.Option("sandbox", help="sandbox, llm or both (both runs the same items in both modes)."),
    repeats: Optional[int] = typer.Option(None, help="Samples per item and mode (default: the task's)."),
    limit: Optional[int] = typer.Option(None, help="Only the first N rows."),
    ids: Optional[str] = typer.Option(None, help="Only these row ids (comma-separated)."),
    concurrency: int = typer.Option(8, help="Samples in flight at once, each in its own sandbox."),
    retries: int = typer.Option(2, help="Retries of a sample whose model server or sandbox failed."),
    output_dir: Optional[Path] = typer.Option(None, help="Run folder (default runs/bench-<task>-<timestamp>)."),
    resume: Optional[Path] = typer.Option(None, help="Finish this earlier run (its settings; done samples are kept)."),
    max_steps: Optional[int] = typer.Option(None, help="Model calls per sample (default 100)."),
    temperature: Optional[float] = typer.Option(None),
    max_tokens: Optional[int] = typer.Option(None),
    extra_body: Optional[str] = typer.Option(None, help="JSON merged into each request."),
    image: str = typer.Option("insandbox:latest"),
    timeout_per_command: float = typer.Option(120.0),
    token_budget: Optional[int] = typer.Option(None, help="Per sample."),
    time_limit: Optional[float] = typer.Option(None, help="Seconds per sample."),
    memory: str = typer.Option("4g"),
    cpus: float = typer.Option(2.0),
    pids_limit: int = typer.Option(1024),
    network: str = typer.Option("bridge"),
    judge_model: Optional[str] = typer.Option(None, help="LLM judge for physics and long_context (else an offline, "
                                                         "labelled approximation)."),
    judge_base_url: Optional[str] = typer.Option(None, help="The judge's endpoint (default: the model's)."),
    judge_api_key: Optional[str] = typer.Option(None),
    judge_prompt: Optional[Path] = typer.Option(None, help="Judge prompt file with {question}, {ground_truth}, "
                                                           "{answer}."),
    list_tasks: bool = typer.Option(False, "--list", help="List the built-in tasks and exit."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Benchmark a model on a task, in sandbox mode, plain mode or both."""

    from .bench.data import DataError
    from .bench.progress import RichBenchProgress
    from .bench.report import rich_tables, write_report
    from .bench.runner import BenchAborted, BenchConfig, run_bench
    from .bench.tasks import builtin_tasks, load_task
    from .config import ConfigError, RunConfig
    from .console import make_console
    from .sandbox.base import SandboxError

    console = make_console()
    if list_tasks:
        for name in builtin_tasks():
            spec = load_task(name)
            typer.echo(f"{name:<16} repeats {spec.repeats:<3} scorer {spec.scorer:<8} {spec.description}")
        return
    if resume is None and not task:
        _fail("name a task (insandbox bench --list), or --resume RUN_DIR")
    if mode not in ("sandbox", "llm", "both"):
        _fail("--mode is sandbox, llm or both")
    try:
        body = json.loads(extra_body) if extra_body else None
    except ValueError as e:
        _fail(f"--extra-body is not valid JSON: {e}")
    run_settings = dict(model=model, base_url=base_url, api_key=api_key, gguf=gguf, temperature=temperature,
                        max_tokens=max_tokens, extra_body=body, image=image, timeout_per_command=timeout_per_command,
                        token_budget=token_budget, time_limit=time_limit,
                        memory=None if memory.lower() in ("none", "0", "") else memory, cpus=cpus or None,
                        pids_limit=pids_limit or None, network=network)
    if max_steps is not None:
        run_settings["max_steps"] = max_steps
    try:
        cfg = BenchConfig(task=task or "resume", data=data, mode=mode, repeats=repeats, limit=limit,
                          ids=[i.strip() for i in ids.split(",") if i.strip()] if ids else None,
                          concurrency=concurrency, retries=retries, output_dir=output_dir, judge_model=judge_model,
                          judge_base_url=judge_base_url or base_url, judge_api_key=judge_api_key,
                          judge_prompt=judge_prompt, run=RunConfig(**run_settings))
    except ValueError as e:
        _fail(str(e))
    progress = RichBenchProgress(console, label=(Path(task).stem if task else "resume"))
    if quiet:
        from .bench.runner import _Quiet
        progress = _Quiet()
    try:
        result, sig = _run_until_done(lambda: run_bench(cfg, progress, resume=resume,
                                                        concurrency=concurrency if resume else None))
    except (ConfigError, DataError, ValueError, FileNotFoundError) as e:
        _fail(str(e))
    except (SandboxError, BenchAborted) as e:
        _fail(str(e), 1)
    finally:
        if hasattr(progress, "close"):
            progress.close()
    if sig is not None:
        raise typer.Exit(128 + sig)
    out, report = write_report([result.run_dir], plots=False)
    for table in rich_tables(report):
        console.print(table)
    console.print(f"results: {result.run_dir / 'results.jsonl'}  summary: {result.run_dir / 'summary.json'}  "
                  f"report: insandbox report {result.run_dir}")


@app.command()
def report(
    run_dirs: list[Path] = typer.Argument(..., help="Benchmark run folders (several: compared side by side)."),
    out: Optional[Path] = typer.Option(None, help="Where to write report.md and the figures (default: "
                                                  "<first run>/report)."),
    plots: bool = typer.Option(True, help="Draw the PNG figures."),
    pool: bool = typer.Option(False, "--pool", help="Pool the runs of the same task and model into one (refused "
                                                    "when their settings differ)."),
) -> None:
    """Accuracy with confidence intervals, sandbox vs plain, capability usage, tokens and time."""

    from .bench.report import rich_tables, write_report
    from .console import make_console

    try:
        out_dir, data = write_report(run_dirs, out, plots=plots, pool=pool)
    except ValueError as e:
        _fail(str(e))
    console = make_console()
    for table in rich_tables(data):
        console.print(table)
    console.print(f"report: {out_dir / 'report.md'}")


@image_app.command("build")
def image_build(
    tag: str = typer.Option("insandbox:latest", help="Image tag to build."),
    base: Optional[str] = typer.Option(None, help="Base image (default: debian:bookworm-slim, or a debootstrapped "
                                                  "Debian where no registry is reachable)."),
    no_cache: bool = typer.Option(False, help="Rebuild every layer."),
    ca_cert: list[Path] = typer.Option([], help="Extra CA certificate to trust in the image (repeatable; the "
                                                "host's /usr/local/share/ca-certificates are always added)."),
) -> None:
    """Build the sandbox image from the Dockerfile shipped with insandbox."""
    from rich.console import Console

    from .sandbox.base import SandboxError
    from .sandbox.image import build_image

    console = Console(highlight=False)
    try:
        with console.status("building", spinner="dots") as status:
            info = build_image(tag, base=base, no_cache=no_cache, extra_ca=ca_cert,
                               progress=lambda line: status.update(line[:120]))
    except SandboxError as e:
        _fail(str(e), 1)
    console.print(f"built [bold]{info.tag}[/bold] on {info.base}: {info.size_bytes / 1e6:,.0f} MB ({info.id[:19]})")


@image_app.command("status")
def image_status(tag: str = typer.Option("insandbox:latest")) -> None:
    """Say whether the image exists and how big it is."""
    from .sandbox.image import image_exists, image_info

    if not image_exists(tag):
        _fail(f"{tag} does not exist; build it with `insandbox image build`", 1)
    info = image_info(tag)
    typer.echo(f"{info.tag}: {info.size_bytes / 1e6:,.0f} MB ({info.id[:19]})")


@app.command()
def clean(
    all_: bool = typer.Option(False, "--all", help="Also remove running sandboxes of live processes."),
    dry_run: bool = typer.Option(False, help="Only list what would be removed."),
) -> None:
    """Remove sandbox containers left behind (only containers insandbox created)."""
    from .sandbox.cleanup import clean as do_clean

    removed = do_clean(everything=all_, dry_run=dry_run)
    for c in removed:
        typer.echo(f"{'would remove' if dry_run else 'removed'} {c.name} (run {c.run_id or '?'}; {c.reason})")
    if not removed:
        typer.echo("nothing to clean")


@app.command("serve-model")
def serve_model(
    gguf: Optional[Path] = typer.Option(None, help="GGUF model file (default: the embedded SmolLM2-135M-Instruct)."),
    host: str = typer.Option("127.0.0.1"),
    port: int = typer.Option(8080),
    n_ctx: Optional[int] = typer.Option(None, help="Context window (default: the model's, at most 16384)."),
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
    script: Path = typer.Argument(..., help="JSON or YAML script (see insandbox.models.scripted_server)."),
    host: str = typer.Option("127.0.0.1"),
    port: int = typer.Option(8011),
    latency: Optional[float] = typer.Option(None, help="Seconds to wait before each answer."),
) -> None:
    """Serve a deterministic scripted model (OpenAI-compatible) for tests and demos."""
    from .models.scripted_server import ScriptedServer

    srv = ScriptedServer(script, host=host, port=port, latency=latency, keep_requests=False)
    typer.echo(f"scripted model server on {srv.url}", err=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


def main() -> None:
    """Console entry point. Once the command is done (everything saved, the sandbox gone)
    the process leaves with os._exit: the interpreter's own shutdown, tearing down openai,
    pydantic and the Docker SDK, would add ~0.3 s to every run for nothing."""
    try:
        app()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
