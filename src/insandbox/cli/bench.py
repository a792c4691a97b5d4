"""`insandbox bench` and `insandbox report`: a benchmark's samples, and what they came to."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..core import defaults
from .common import BadArgument, fail, finish
from .options import CONFIG, RUN, run_settings, shared_options

POOL = "Sandbox pool"


@shared_options(*RUN)
def bench(
    task: Annotated[Optional[str], typer.Argument(help="A built-in task (math, physics, chem, biomed, long_context, "
                                                       "instruct_follow), a task YAML file, or a Harbor task folder "
                                                       "(or a folder of them).")] = None,
    data: Annotated[Optional[str], typer.Option(help="Rows instead of the task's hub dataset: a JSON/JSONL/parquet "
                                                     "file, a save_to_disk folder (FOLDER[:SPLIT]) or "
                                                     "hf:NAME[:CONFIG[:SPLIT]] (split: test, else the only one).",
                                                metavar="ROWS")] = None,
    mode: Annotated[str, typer.Option(help="sandbox, llm or both (both runs the same items in both modes).",
                                      metavar="MODE")] = "sandbox",
    repeats: Annotated[Optional[int], typer.Option(help="Samples per item and mode.",
                                                   show_default="the task's")] = None,
    limit: Annotated[Optional[int], typer.Option(help="Only the first N rows.")] = None,
    ids: Annotated[Optional[str], typer.Option(help="Only these row ids (comma-separated).", metavar="IDS")] = None,
    concurrency: Annotated[Optional[int], typer.Option(
        help="Samples in flight at once, each in its own sandbox.",
        show_default=f"{defaults.CONCURRENCY}; with --resume: the run's own")] = None,
    retries: Annotated[int, typer.Option(help="Retries of a sample whose model server or sandbox "
                                              "failed.")] = defaults.SAMPLE_RETRIES,
    out: Annotated[Optional[Path], typer.Option(help="The run folder.", metavar="DIR",
                                                show_default="runs/bench-<task>-<date>-<time>-<id>")] = None,
    resume: Annotated[Optional[Path], typer.Option(help="Finish this earlier run with its own settings (done "
                                                        "samples are kept; --concurrency may change).",
                                                   metavar="DIR")] = None,
    judge_model: Annotated[Optional[str], typer.Option(help="LLM judge for physics and long_context.", metavar="NAME",
                                                       show_default="an offline, labelled approximation")] = None,
    judge_base_url: Annotated[Optional[str], typer.Option(help="The judge's endpoint.", metavar="URL",
                                                          show_default="the model's")] = None,
    judge_api_key: Annotated[Optional[str], typer.Option(help="The judge's API key.", metavar="KEY",
                                                         show_default="the model's")] = None,
    judge_prompt: Annotated[Optional[Path], typer.Option(help="Judge prompt file with {question}, {ground_truth}, "
                                                              "{answer}.", metavar="FILE")] = None,
    agent: Annotated[str, typer.Option(help="model, or oracle: a Harbor task's own solution/solve.sh instead of a "
                                            "model (checks a task set: each should score 1).",
                                       metavar="AGENT")] = "model",
    list_tasks: Annotated[bool, typer.Option("--list", help="List the built-in tasks and exit.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    pool: Annotated[bool, typer.Option(
        help="Samples take started sandboxes from a pool, started ahead while samples run (--no-pool: each "
             "sample starts and removes its own).", rich_help_panel=POOL)] = True,
    recycle: Annotated[bool, typer.Option(
        help="The pool recycles a sandbox between samples: every process killed, the filesystem restored to "
             "the image's, a fresh shell (needs a local engine and root; else fresh sandboxes).",
        rich_help_panel=POOL)] = True,
    pool_size: Annotated[Optional[int], typer.Option(
        help="Sandboxes alive at most, in use or waiting.", rich_help_panel=POOL,
        show_default=f"concurrency + min(concurrency, {defaults.POOL_EXTRA})")] = None,
    max_uses: Annotated[int, typer.Option(
        help="Samples one recycled sandbox serves before a fresh one replaces it.",
        rich_help_panel=POOL)] = defaults.POOL_MAX_USES,
    ray: Annotated[Optional[str], typer.Option("--ray", help="Run the samples on a Ray cluster: auto (the one "
                                                             "started on this machine) or its ADDRESS "
                                                             "(host:port). Needs insandbox[ray].",
                                               metavar="ADDRESS")] = None,
    processes: Annotated[int, typer.Option(
        "--processes", min=1, help="Run the samples in N worker processes on this machine, each with its own "
                                   "share of --concurrency, its own pool and model client: past ~200 samples at "
                                   "once one process's event loop is the limit, not the cores.")] = 1,
    config: CONFIG = None,  # applied before this is called (config_file.py)
    *, shared: dict,  # the values of the options in RUN (options.py)
) -> None:
    """Benchmark a model on a task, in sandbox mode, plain mode or both."""
    from ..bench.data import DataError
    from ..bench.progress import RichBenchProgress
    from ..bench.report import rich_tables
    from ..bench.report_files import write_report
    from ..bench.runner import BenchAborted, BenchConfig
    from ..bench.tasks import builtin_tasks, load_task
    from ..config import ConfigError, validated
    from ..distributed.bench import run_bench  # on this machine, or with --ray on a cluster
    from ..runs import layout
    from .console import make_console, shown

    console = make_console()
    if list_tasks:
        for name in builtin_tasks():
            spec = load_task(name)
            typer.echo(f"{name:<16} repeats {spec.repeats:<3} scorer {spec.scorer:<8} {spec.description}")
        return
    try:
        if resume is None and not task:
            raise BadArgument("name a task (insandbox bench --list), or --resume RUN_DIR")
        if mode not in ("sandbox", "llm", "both"):
            raise BadArgument("--mode is sandbox, llm or both")
        if agent not in ("model", "oracle"):
            raise BadArgument("--agent is model or oracle")
        harbor_path = _harbor_path(task, resume)
        if agent == "oracle" and harbor_path is None:
            raise BadArgument("--agent oracle runs a Harbor task's solution: name a Harbor task folder")
        run_cfg = validated(run_settings(shared))
        if resume is None and out is None:  # named now, so that an interrupted run can say where it is
            out = layout.default_bench_dir(BenchConfig.model_fields["runs_root"].default,
                                           Path(task).name if harbor_path else task)
        given = {"concurrency": concurrency} if concurrency is not None else {}  # else BenchConfig's own
        cfg = BenchConfig(task=task or "resume", data=data, mode=mode, repeats=repeats, limit=limit,
                          ids=[i.strip() for i in ids.split(",") if i.strip()] if ids else None, **given,
                          retries=retries, output_dir=out, judge_model=judge_model,
                          judge_base_url=judge_base_url or shared["base_url"], judge_api_key=judge_api_key,
                          judge_prompt=judge_prompt, pool=pool, recycle=recycle, pool_size=pool_size,
                          max_uses=max_uses, run=run_cfg, agent=agent)
    except (BadArgument, ConfigError) as e:
        fail(str(e))
    except ValueError as e:  # pydantic, for the benchmark's own settings
        from pydantic import ValidationError

        from ..config import describe
        fail(describe(e) if isinstance(e, ValidationError) else str(e))
    if harbor_path is not None:
        return _bench_harbor(harbor_path, cfg, console, quiet, resume, ray, processes)
    progress = RichBenchProgress(console, label=(Path(task).stem if task else "resume"))
    if quiet:
        from ..bench.runner import BenchProgress
        progress = BenchProgress()
    try:
        result = finish(lambda: run_bench(cfg, progress, resume=resume,
                                          concurrency=concurrency if resume else None, ray=ray,
                                          processes=processes),
                        bad=(DataError, ValueError, FileNotFoundError), failed=(BenchAborted,))
    except typer.Exit as e:
        if e.exit_code > 128:  # a signal: the samples recorded are kept, and the run can be finished
            _say_resume(resume or cfg.output_dir)
        raise
    finally:
        progress.close()
    out, report = write_report([result.run_dir], plots=False)
    for table in rich_tables(report):
        console.print(table)
    console.print(shown(f"results: {result.run_dir / 'results.jsonl'}  summary: {result.run_dir / 'summary.json'}  "
                        f"report: insandbox report {result.run_dir}  view: insandbox view {result.run_dir}"))
    errors = sum(a.get("errors") or 0 for a in report["accuracy"])
    if errors:  # an accuracy with failed samples in it is no success (CI must not read it as one)
        samples = sum(a.get("n") or 0 for a in report["accuracy"])
        console.print(shown(f"error: {errors} of {samples} samples ended in an error (counted as wrong in the "
                            f"accuracy; results.jsonl's `error` says why); run them again with: insandbox bench "
                            f"--resume {result.run_dir}"), style="red")
        raise typer.Exit(1)


def _harbor_path(task: Optional[str], resume: Optional[Path]) -> Optional[Path]:
    """The Harbor task or dataset folder this command runs (or resumes), else None."""
    from ..bench import harbor
    from ..bench.harbor.archive import is_archive, unpack
    from ..bench.harbor.dataset import is_dataset_run

    if resume is not None:
        return resume if is_dataset_run(resume) else None
    if task and is_archive(Path(task)):
        folder = unpack(Path(task))
        if not harbor.is_harbor_path(folder):
            raise BadArgument(f"{task}: the archive holds no Harbor task folder (task.toml and instruction.md)")
        return folder
    return Path(task) if task and harbor.is_harbor_path(Path(task)) else None


def _bench_harbor(path: Path, cfg, console, quiet: bool, resume: Optional[Path], ray: Optional[str],
                  processes: int) -> None:
    """Harbor tasks: each task a benchmark run (bench/harbor/dataset.py); a dataset's table at the end."""
    from ..bench.data import DataError
    from ..bench.harbor import dataset
    from ..bench.progress import RichBenchProgress
    from ..bench.runner import BenchAborted, BenchProgress
    from ..distributed.bench import run_bench
    from .console import shown

    single = resume is None and (path / "task.toml").is_file()

    def progress_for(task):
        return RichBenchProgress(console, label=task.name) if single and not quiet else BenchProgress()

    async def run_one(task_cfg, progress):
        try:
            return await run_bench(task_cfg, progress, ray=ray, processes=processes)
        finally:
            progress.close()

    async def everything():
        if resume is not None:  # a dataset's run folder: each task's run finished with its own settings
            return [await run_bench(cfg, BenchProgress(), resume=folder, ray=ray, processes=processes)
                    for folder in dataset.resumable(resume)]
        return await dataset.run_tasks(path, cfg, run_one, progress_for, on_status=lambda t: console.print(shown(t)))

    results = finish(everything, bad=(DataError, ValueError, FileNotFoundError), failed=(BenchAborted,))
    errors = 0
    for result in results:
        recs = result.records
        errors += sum(1 for r in recs if r.get("error"))
        scores = [r.get("score") or 0.0 for r in recs]
        mean = sum(scores) / len(scores) if scores else 0.0
        console.print(shown(f"{result.run_dir.name}: mean reward {mean:.3f} over {len(recs)} sample(s), "
                            f"{sum(1 for r in recs if r.get('error'))} failed  ({result.run_dir / 'results.jsonl'})"))
    out = resume or cfg.output_dir
    if not single:
        console.print(shown(f"tasks: {out / dataset.INDEX}  view: insandbox view {out}"))
    if errors:
        console.print(shown(f"error: {errors} sample(s) ended in an error or a failed verification (counted as 0; "
                            f"results.jsonl's `error` says why); run them again with: insandbox bench --resume "
                            f"{out}"), style="red")
        raise typer.Exit(1)


def _say_resume(run_dir: Optional[Path]) -> None:
    from ..runs import layout

    if run_dir is not None and (Path(run_dir) / layout.BENCH).is_file():
        typer.echo(f"insandbox: interrupted: the samples recorded so far are kept in {run_dir}; finish the run "
                   f"with: insandbox bench --resume {run_dir}", err=True)


def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="Benchmark run folders (several: compared side by side).")],
    out: Annotated[Optional[Path], typer.Option(help="Where to write report.md, report.html and the figures.",
                                                metavar="DIR", show_default="<first run>/report")] = None,
    plots: Annotated[bool, typer.Option(help="Draw the PNG figures.")] = True,
    merge: Annotated[bool, typer.Option("--merge", help="Merge the runs of the same task and model into one (refused "
                                                        "when their settings differ).")] = False,
) -> None:
    """Accuracy with confidence intervals, sandbox vs plain, capability usage, tokens, cost and time."""
    from ..bench.report import rich_tables
    from ..bench.report_files import write_report
    from .console import make_console, shown

    try:
        out_dir, data = write_report(run_dirs, out, plots=plots, pool=merge)
    except ValueError as e:
        fail(str(e))
    console = make_console()
    for table in rich_tables(data):
        console.print(table)
    console.print(shown(f"report: {out_dir / 'report.md'}, {out_dir / 'report.html'}"))
