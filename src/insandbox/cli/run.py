"""`insandbox run`: one task in one sandbox."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import BadArgument, fail, finish
from .options import CONFIG, RUN, read_query, run_settings, shared_options


@shared_options(*RUN)
def run(
    query: Annotated[Optional[str], typer.Argument(help="The task. '-' reads it from stdin.")] = None,
    query_file: Annotated[Optional[Path], typer.Option(help="Read the task from this file.", metavar="FILE")] = None,
    mode: Annotated[str, typer.Option(help="sandbox: tools in a container; llm: one plain completion.",
                                      metavar="MODE")] = "sandbox",
    input_dir: Annotated[Optional[Path], typer.Option(help="Host folder copied to the sandbox's input folder.",
                                                      metavar="DIR")] = None,
    out: Annotated[Optional[Path], typer.Option(help="The run folder.", metavar="DIR",
                                                show_default="runs/<date>-<time>-<id>")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No step-by-step view.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary on stdout (the view goes to "
                                                          "stderr).")] = False,
    config: CONFIG = None,  # applied before this is called (config_file.py)
    *, shared: dict,  # the values of the options in RUN (options.py)
) -> None:
    """Run one task: the model works in a fresh sandbox until it submits."""
    from ..config import ConfigError, validated
    from ..runs.session import arun
    from .console import RichView, make_console

    try:
        text = read_query(query, query_file)
        if mode not in ("sandbox", "llm"):
            raise BadArgument("--mode is sandbox or llm")
        cfg = validated(dict(run_settings(shared), mode=mode, input_dir=input_dir, output_dir=out))
    except (BadArgument, ConfigError) as e:
        fail(str(e))
    view = RichView(make_console(stderr=json_out), show_steps=not quiet, max_steps=cfg.max_steps)
    result = finish(lambda: arun(text, cfg, observer=view))
    if json_out:
        t = result.trajectory
        typer.echo(json.dumps({"run_dir": str(result.run_dir), "exit_reason": t.exit_reason,
                               "exit_detail": t.exit_detail, "answer": result.answer, "files": result.files,
                               "skipped": [s.model_dump() for s in t.output_skipped],
                               "totals": t.totals.model_dump(),
                               "price": t.price.model_dump() if t.price else None}, ensure_ascii=False))
    if result.exit_reason is None or result.exit_reason.is_failure:
        raise typer.Exit(1)
