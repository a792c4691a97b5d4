"""`insandbox run`: one task in one sandbox."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..core import defaults
from .common import BadArgument, _fail, _finish
from .options import (
    SHARED,
    ApiKey,
    BaseUrl,
    CapAdd,
    CommandTimeout,
    CopyFileLimit,
    CopyFilesLimit,
    CopyTotalLimit,
    Cpus,
    Disk,
    EnvVars,
    ExtraBody,
    Gguf,
    Image,
    Logprobs,
    MaxRetries,
    MaxSandboxes,
    MaxSteps,
    MaxTokens,
    Memory,
    Model,
    Network,
    OutputLimit,
    PidsLimit,
    Prices,
    PromptCaching,
    PromptConfig,
    Provider,
    RequestTimeout,
    Runtime,
    SendReasoning,
    StallTimeout,
    Stream,
    StuckAfter,
    Temperature,
    ThinkingBudget,
    TimeLimit,
    TokenBudget,
    ToolChoice,
    ToolFormat,
    TopLogprobs,
    _read_query,
    _shared_settings,
    _validated,
)


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
    image: Image = defaults.IMAGE, timeout_per_command: CommandTimeout = defaults.COMMAND_TIMEOUT_S,
    output_limit: OutputLimit = defaults.OUTPUT_LIMIT, memory: Memory = defaults.MEMORY, cpus: Cpus = defaults.CPUS,
    pids_limit: PidsLimit = defaults.PIDS, network: Network = defaults.NETWORK, disk: Disk = defaults.DISK,
    runtime: Runtime = None, cap_add: CapAdd = None, env: EnvVars = None,
    max_output_file_size: CopyFileLimit = "512m", max_output_size: CopyTotalLimit = "1g",
    max_output_files: CopyFilesLimit = defaults.COPY_MAX_FILES, max_sandboxes: MaxSandboxes = None,
) -> None:
    """Run one task: the model works in a fresh sandbox until it submits."""
    from ..config import ConfigError
    from ..runs.session import arun
    from .console import RichView, make_console

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
