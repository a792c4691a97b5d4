"""`insandbox replay` and `insandbox fork`: a recorded run again, or continued N ways from a step."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import BadArgument, fail, finish
from .options import FORK_MODEL, GRANTS, S, read_query, sandbox_given, settings, shared_options, show_granted


@shared_options("backend", *GRANTS[1:], unset=True)  # --image: replay words it its own way, before --quiet
def replay(
    run_dir: Annotated[Path, typer.Argument(help="A run folder, or a benchmark sample's samples/<mode>/<id>/r<k>.")],
    until: Annotated[Optional[int], typer.Option(help="Replay steps 1..K only.")] = None,
    ignore: Annotated[Optional[list[str]], typer.Option(
        "--ignore", help="A regular expression whose matches are replaced by <ignored> in both observations "
                         "before comparing, e.g. for timings or PIDs (repeatable).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Also write the report (every diff) to this JSON file.",
                                                metavar="FILE")] = None,
    input_dir: Annotated[Optional[Path], typer.Option(help="Take the input files from this folder instead of the "
                                                           "recorded ones.")] = None,
    image: Annotated[Optional[str], typer.Option(help="Replay in this image instead of the recorded one.",
                                                 rich_help_panel=S, metavar="IMAGE", show_default=False)] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the summary line.")] = False,
    *, shared: dict,  # the sandbox options of GRANTS (options.py), None when not given
) -> None:
    """Run a recorded trajectory's tool calls again in a fresh sandbox and report, call by call, where the
    observations differ. The sandbox options replace the recorded settings; a recorded setting beyond
    run's defaults (another network, capabilities, a runtime or image, looser limits) is refused unless
    given here. Exit status 0 when the replay ran, whatever it found; 1 when the sandbox failed; 2 for bad
    arguments (no trajectory, input files gone, a bad --ignore, a run folder asking for what it may not)."""
    from ..config import ConfigError
    from ..replay.replayer import Replayer, ReplayError, load_recorded
    from ..replay.report import print_report, write_json
    from ..runs.inputs import InputsMissing
    from ..runs.safe_files import UnsafeRunFolder
    from ..runs.session import prepare_sandbox
    from .console import make_console

    if until is not None and until < 1:
        fail("--until: give a step number from 1")
    try:
        recorded = load_recorded(run_dir, given=sandbox_given({**shared, "image": image}))
        if shared.get("backend"):  # never taken from the run folder: the backend is this machine's choice
            recorded.settings = recorded.settings.model_copy(update={"backend": shared["backend"]})
        replayer = Replayer(recorded, ignore or [], input_dir)
    except (BadArgument, ConfigError, ReplayError, InputsMissing, UnsafeRunFolder) as e:
        fail(str(e))
    show_granted(recorded.granted)

    async def go():
        await prepare_sandbox(recorded.settings)
        try:
            return await replayer.replay(until)
        finally:
            await replayer.close()

    report = finish(go)
    console = make_console()
    if quiet:
        first = report.first_divergence
        typer.echo(f"{report.steps_replayed} steps, {report.calls} calls: {report.identical} identical, "
                   f"{report.differing} differ; first divergence: "
                   + (f"step {first['step']}, call {first['call']}" if first else "none"))
    else:
        print_report(report, console)
    if out is not None:
        write_json(report, out)
    if report.stopped:
        raise typer.Exit(1)


@shared_options(*FORK_MODEL, *GRANTS, unset=True, tool_format=Annotated[Optional[str], typer.Option(
    help="native or text.", metavar="FORMAT", show_default="as recorded")])
def fork(
    run_dir: Annotated[Path, typer.Argument(help="A run folder, or a benchmark sample's samples/<mode>/<id>/r<k>.")],
    step: Annotated[int, typer.Option(help="Fork after this step (0: before the first).")],
    branches: Annotated[int, typer.Option(help="Branches, each in a sandbox of its own.")] = 2,
    prompt_append: Annotated[Optional[str], typer.Option(help="A user message added after step K's results.")] = None,
    query_file: Annotated[Optional[Path], typer.Option(help="Replace the task's text in the first user message with "
                                                            "this file's.")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Where the branch-<i> folders go.", metavar="DIR",
                                                show_default="RUN_DIR/forks/step-K")] = None,
    ignore: Annotated[Optional[list[str]], typer.Option("--ignore", help="As for replay: masked when comparing the "
                                                        "replayed steps with the recorded ones.")] = None,
    input_dir: Annotated[Optional[Path], typer.Option(help="Take the input files from this folder instead of the "
                                                           "recorded ones.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No line per branch step.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary on stdout.")] = False,
    *, shared: dict,  # the options of FORK_MODEL and GRANTS (options.py), None when not given
) -> None:
    """Replay a run's steps 1..K, snapshot the sandbox, and let N branches continue the conversation from
    there with the given model or prompt, each in its own sandbox and run folder. The model server is the one
    --base-url names: never one the run folder names, even on this machine (the embedded model needs none);
    a recorded --extra-body or --max-steps above the default is given again here. The sandbox options are as
    for replay.
    Exit status 0 when every branch ended on the model's terms or a limit; 1 when a branch, the model server
    or the sandbox failed; 2 for bad arguments (and a run folder asking for what it may not)."""
    from ..config import ConfigError
    from ..replay.fork import fork_run
    from ..replay.replayer import ReplayError
    from ..runs.inputs import InputsMissing
    from ..runs.safe_files import UnsafeRunFolder
    from .console import make_console, shown

    query = None
    try:
        overrides = {name: None for name in FORK_MODEL} | settings({name: shared[name] for name in FORK_MODEL})
        if query_file is not None:
            query = read_query(None, query_file)
        given = sandbox_given(shared)
    except (BadArgument, ConfigError) as e:
        fail(str(e))
    console = make_console(stderr=json_out)

    def on_step(i: int, s) -> None:
        if not quiet:
            calls = ", ".join(c.name for c in s.tool_calls) or "no call"
            console.print(f"branch {i} step {s.index}: {shown(calls)}")

    result = finish(lambda: fork_run(run_dir, step, branches, overrides, prompt_append=prompt_append, query=query,
                                     output_dir=out, ignore=tuple(ignore or ()), input_dir=input_dir,
                                     sandbox=given, on_granted=show_granted, on_step=on_step),
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
