"""`insandbox bench`: run a task's rows in sandbox mode, plain mode or both, concurrently.

A sample is one (row, repeat, mode); it runs to its record in sample.py (`SampleRunner`: its own run
folder under samples/, retries, engine outages, scoring), all samples sharing one Session (one model
client, one price, one pool of sandboxes). This file schedules them (up to `concurrency` in flight,
here or through an executor such as distributed/bench.py's Ray cluster) and records them: the
moment a sample is scored its record is appended to results.jsonl, so a killed run loses nothing
and `--resume RUN_DIR` runs only what is missing. Ten infrastructure failures in a row stop the
run, since something is down; so does an engine that does not come back (resumable).

A run folder that cannot be written (disk full, read-only) stops the run at once with what,
where and how to resume: every record already written stays whole.
"""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..config import ConfigError, RunConfig, restored
from ..core import defaults
from ..core.extras import require
from ..core.redact import redact, secrets_in
from ..core.trajectory import now_iso
from ..models.endpoint import check_endpoint
from ..models.openai_compat import OpenAIChatClient
from ..models.pricing import PriceTable, load_prices
from ..prompts import PromptConfig, load_prompt_overrides
from ..runs import layout
from ..runs.session import PoolSettings, Session, SessionObserver, check_writable, settings
from . import degraded, harbor, stats
from .data import Row, load_rows
from .sample import (
    BenchAborted,
    EngineOutage,
    EngineWatch,
    RunFolderUnwritable,
    SampleRecord,
    SampleRunner,
    is_host_write_error,
)
from .scorers import JudgeSettings, make_scorer, modules_needed
from .store import ResultStore, latest, sample_key, write_atomic
from .tasks import TaskSpec, load_task

MAX_CONSECUTIVE_INFRA = 10
__all__ = ["BenchAborted", "BenchConfig", "BenchResult", "BenchRun", "EngineOutage", "RunFolderUnwritable",
           "SampleExecutor", "load_bench_config", "open_sample_runner", "resumed_config", "run_bench"]


class BenchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str  # a built-in task name, a task YAML path, or a Harbor task folder
    task_spec: Optional[dict] = None  # the task itself when it is not read from `task` (a Harbor task's: harbor/)
    agent: Literal["model", "oracle"] = "model"  # oracle: a Harbor task's own solution/solve.sh instead of a model
    data: Optional[str] = None  # --data: rows instead of the task's own (core/data_source.py: file, folder, hf:...)
    mode: Literal["sandbox", "llm", "both"] = "sandbox"
    repeats: Optional[int] = Field(default=None, ge=1)  # default: the task's
    limit: Optional[int] = Field(default=None, ge=1)
    ids: Optional[list[str]] = None
    concurrency: int = Field(default=defaults.CONCURRENCY, ge=1)
    retries: int = Field(default=defaults.SAMPLE_RETRIES, ge=0)  # per sample, for infrastructure failures
    retry_backoff_s: float = Field(default=defaults.RETRY_BACKOFF_S, ge=0)  # doubled at each retry, at most 30 s
    engine_wait_s: float = Field(default=defaults.ENGINE_WAIT_S, ge=0)  # sandbox samples wait this for an engine
    pool: bool = True  # samples take started sandboxes from a pool (sandbox/pool.py) instead of starting their own
    recycle: bool = True  # the pool recycles a sandbox between samples where the engine allows (sandbox/recycle.py)
    pool_size: Optional[int] = Field(default=None, ge=1)  # sandboxes alive at most; default: concurrency + a few
    max_uses: int = Field(default=defaults.POOL_MAX_USES, ge=1)  # samples a recycled sandbox serves, at most
    output_dir: Optional[Path] = None
    runs_root: Path = Path("runs")
    judge_model: Optional[str] = None
    judge_base_url: Optional[str] = None
    judge_api_key: Optional[str] = Field(default=None, repr=False)
    judge_prompt: Optional[Path] = None
    run: RunConfig = Field(default_factory=RunConfig)  # model, sandbox and loop settings of every sample

    @field_validator("data", mode="before")
    @classmethod
    def _data_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, Path) else value

    def public(self) -> dict:
        data = self.model_dump(mode="json", exclude={"judge_api_key", "run"})
        data["run"] = self.run.public()
        data["judge_base_url"] = redact(self.judge_base_url, self.run.secrets() | secrets_in(self.judge_api_key))
        return data


class BenchProgress(SessionObserver):
    """What a benchmark tells whoever shows its progress (it is also its session's observer: status
    lines, image build lines). Each hook does nothing here: a display overrides the ones it shows."""

    def on_start(self, total: int, already_done: int, run_dir: Path, concurrency: int) -> None:
        """The run folder is ready and the samples start."""

    def on_sample_start(self, row_id: str, mode: str, repeat: int) -> None:
        """A sample got a slot and runs now."""

    def on_sample(self, record: dict) -> None:
        """A sample ended (its results.jsonl record)."""

    def close(self) -> None:
        """The benchmark is over (or stopped): let go of the display."""


@dataclass
class BenchResult:
    run_dir: Path
    summary: dict
    records: list[dict] = field(default_factory=list)


def load_bench_config(run_dir: Path) -> BenchConfig:
    path = Path(run_dir) / layout.BENCH
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a benchmark run folder (no {layout.BENCH})")
    meta = json.loads(path.read_text(encoding="utf-8"))
    saved = meta["config"]
    run = saved.pop("run")
    run.pop("api_key_set", None)
    if meta.get("max_steps") is not None:  # the step limit the samples ran with (the task's, or --max-steps)
        run["max_steps"] = meta["max_steps"]
    elif run.get("max_steps") == RunConfig.model_fields["max_steps"].default:
        run.pop("max_steps")  # older runs: a default here left the task's own limit in force; keep it so
    return BenchConfig(**saved, run=RunConfig(**run))


def _with_credentials(saved: BenchConfig, given: BenchConfig) -> BenchConfig:
    """A resumed run's settings, with the credentials bench.json does not hold taken from the command
    line (or $INSANDBOX_BASE_URL) where they match what was recorded."""
    run = saved.run.model_copy(update={
        "base_url": restored(saved.run.base_url, given.run.with_environment().base_url, "--base-url"),
        "extra_body": restored(saved.run.extra_body, given.run.extra_body, "--extra-body")})
    return saved.model_copy(update={"run": run, "judge_base_url": restored(saved.judge_base_url,
                                                                           given.judge_base_url, "--judge-base-url")})


async def open_sample_runner(cfg: BenchConfig, task: TaskSpec, prompts: PromptConfig, run_dir: Path, *,
                             max_steps: int, prices: PriceTable, progress: Optional[BenchProgress] = None,
                             sandbox: bool = True, prestart: bool = True,
                             on_unwritable: Optional[Callable[[OSError], BaseException]] = None) -> SampleRunner:
    """A SampleRunner for `cfg`'s samples, its Session open (the sandbox backend and a pool when `sandbox`;
    `prestart=False` where the demand is not known, a Ray node: sandboxes start only when a sample asks),
    with its scorer (and judge). `run_dir` is where the samples' folders go."""
    progress = progress or BenchProgress()
    oracle = harbor.OracleClient() if cfg.agent == "oracle" else None
    session = Session(settings(cfg.run, {"max_steps": max_steps}), progress, prompts=prompts, prices=prices,
                      client=oracle)
    c = cfg.concurrency
    pool = PoolSettings(size=cfg.pool_size or defaults.pool_size(c), recycle=cfg.recycle, max_uses=cfg.max_uses,
                        prestart=prestart, close_wait_s=cfg.engine_wait_s) if cfg.pool else None
    await session.open(sandbox=sandbox, pool=pool)
    if not session.price.known:  # said once here; each record's cost is None
        progress.on_status(f"{session.price.describe()}: sample costs are recorded as unknown (add it to a "
                           "price file: --prices FILE)")
    judge, settings_ = None, None
    if cfg.judge_model:
        run = session.cfg
        judge = OpenAIChatClient(cfg.judge_model, base_url=cfg.judge_base_url, api_key=cfg.judge_api_key or run.api_key,
                                 temperature=0.0, max_retries=run.max_retries)
        settings_ = JudgeSettings(judge, cfg.judge_prompt.read_text(encoding="utf-8") if cfg.judge_prompt else None)
    verify = harbor.HarborVerifier(task.harbor) if task.harbor else None
    return SampleRunner(session, task, make_scorer(task.scorer, task.offline_scorer, settings_), run_dir, verify=verify,
                        retries=cfg.retries, retry_backoff_s=cfg.retry_backoff_s, judge=judge,
                        engine=EngineWatch(cfg.run.backend, cfg.engine_wait_s, progress.on_status, run_dir),
                        on_unwritable=on_unwritable)


class SampleExecutor(Protocol):
    """Where samples run instead of this process (e.g. distributed/bench.py: over a Ray cluster).
    `run` gives the sample's record once its folder is in the run folder; the run appends it."""

    same_machine: bool  # its samples reach the model server from this machine (else each node looks itself)

    async def start(self, bench: BenchRun) -> None: ...

    async def run(self, bench: BenchRun, row: Row, repeat: int, mode: str, cut_off: bool) -> SampleRecord: ...

    async def close(self) -> None: ...

    def session_summary(self) -> dict:
        """What summary.json's `session` adds from the executor's side (after `close`), e.g. its pools."""


class BenchRun:
    """One benchmark run (or the rest of one, resumed): schedules its samples and records each."""

    def __init__(self, cfg: BenchConfig, run_dir: Optional[Path] = None, progress: Optional[BenchProgress] = None,
                 executor: Optional[SampleExecutor] = None):
        self.cfg = cfg
        self.progress = progress or BenchProgress()
        self.executor = executor  # None: samples run here
        self.task: TaskSpec = TaskSpec(**cfg.task_spec) if cfg.task_spec else load_task(cfg.task)
        self.prompts: PromptConfig = self.task.prompts()
        if cfg.run.prompt_config:  # the user's file replaces the keys it sets, the task the rest
            self.prompts = self.prompts.model_copy(update=load_prompt_overrides(cfg.run.prompt_config))
        self.run_dir = Path(run_dir or cfg.output_dir or layout.default_bench_dir(cfg.runs_root, cfg.task))
        self.store = ResultStore(self.run_dir)
        self.modes = ["sandbox", "llm"] if cfg.mode == "both" else [cfg.mode]
        self.repeats = cfg.repeats or self.task.repeats
        explicit = "max_steps" in cfg.run.model_fields_set
        self.max_steps = cfg.run.max_steps if explicit or not self.task.max_steps else self.task.max_steps
        self.prices: Optional[PriceTable] = None  # the price table, read before the run folder exists
        self.samples: Optional[SampleRunner] = None  # once the run's session is open
        self._infra_streak = 0
        self._stop: Optional[BenchAborted] = None  # set by a sample whose failure stops the run
        self._recorded: set[tuple[str, str, int]] = set()  # samples with a record when the session began
        self._sandbox_samples_left = 0  # sandbox samples that have not begun yet (the pool's demand)
        self._finished = 0  # samples recorded by this session
        self._tool_use = [0, 0]  # this session's sandbox samples: [without a tool call, counted] (degraded.py)
        self._warned_no_calls = False

    @property
    def model(self) -> Optional[str]:
        """The model's name, as its client has it (the one the server listed when none was given)."""
        client = self.samples.session.client if self.samples else None
        return (client.name if client is not None else None) or self.cfg.run.model

    # ------------------------------------------------------------------ set-up
    def _save_config(self, rows: list[Row]) -> None:
        path = self.run_dir / layout.BENCH
        if path.is_file():
            saved = json.loads(path.read_text(encoding="utf-8"))
            if saved.get("row_ids") != [r.id for r in rows]:
                raise ConfigError(f"{self.run_dir} was run on other rows; resume with the same data and task")
            return
        write_atomic(path, json.dumps({"config": self.cfg.public(), "task": self.task.model_dump(),
                                       "row_ids": [r.id for r in rows], "modes": self.modes, "repeats": self.repeats,
                                       "max_steps": self.max_steps, "created_at": now_iso()},
                                      indent=1, ensure_ascii=False))

    def executor_args(self, **cfg_updates: Any) -> tuple:
        """What an executor's node (or worker process) is given to run this run's samples: the settings with
        this machine's environment (key, URL; not each node's), the model the server listed, the task,
        prompts, step limit and price table, and a --judge-prompt file's text (the file is here)."""
        run = self.cfg.run.with_environment()
        if not run.model and self.model:
            run = run.model_copy(update={"model": self.model})
        cfg = self.cfg.model_copy(update={"run": run, **cfg_updates})
        judge = self.cfg.judge_prompt.read_text(encoding="utf-8") if self.cfg.judge_prompt else None
        return cfg, self.task, self.prompts, self.max_steps, self.prices, judge

    def unwritable(self, error: OSError) -> RunFolderUnwritable:
        """The run folder takes nothing more: the stop, with what is kept and how to go on."""
        where = error.filename or self.run_dir
        try:
            recorded = len(latest(self.store.load()))
        except OSError:
            recorded = "the"
        return RunFolderUnwritable(
            f"cannot write the run folder: {error.strerror or error} ({where}). The run stopped; {recorded} "
            f"sample(s) already recorded are kept whole in {self.store.path}. Free some space (or fix the device) "
            f"and finish the run with: insandbox bench --resume {self.run_dir}")

    def _open_folder(self, rows: list[Row]) -> list[tuple[Row, int, str]]:
        """The run folder made (or found again), and the samples it still lacks."""
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._save_config(rows)
            self.store.compact()  # one record per sample, also in files of older versions
        except OSError as e:
            if not is_host_write_error(e):
                raise
            raise self.unwritable(e) from e
        done = self.store.finished()
        self._recorded = {sample_key(r) for r in self.store.load()}
        return [(row, k, mode) for row in rows for k in range(self.repeats) for mode in self.modes
                if (row.id, mode, k) not in done]

    async def _open(self, todo: list[tuple[Row, int, str]]) -> None:
        """The samples' session and runner; sandboxes only where this process runs sandbox samples (an
        executor's nodes prepare their own)."""
        sandbox = "sandbox" in self.modes and bool(todo) and self.executor is None
        self._sandbox_samples_left = sum(1 for s in todo if s[2] == "sandbox") if sandbox else 0
        self.samples = await open_sample_runner(self.cfg, self.task, self.prompts, self.run_dir,
                                                max_steps=self.max_steps, prices=self.prices,
                                                progress=self.progress, sandbox=sandbox, on_unwritable=self.unwritable)
        if self.executor is not None and todo:
            await self.executor.start(self)

    # ------------------------------------------------------------------ the run
    async def run(self) -> BenchResult:
        # what the summary and the scorer import, checked before any sample runs (MissingExtra names the extra)
        require("bench", "scipy", *modules_needed(self.task.scorer, self.task.offline_scorer,
                                                  bool(self.cfg.judge_model)))
        self.prices = load_prices(self.cfg.run.prices)  # a bad price file stops the run before its folder exists
        if self.task.harbor:
            if self.modes != ["sandbox"]:
                raise ConfigError("a Harbor task runs in sandbox mode only (its verifier looks at the sandbox)")
            rows = harbor.rows_of(self.task, oracle=self.cfg.agent == "oracle")
        else:
            rows = load_rows(self.cfg.data, self.task.dataset, self.task.config, self.task.split, self.cfg.ids,
                             self.cfg.limit)
        if not rows:
            raise ConfigError("no rows to run (check --ids / --limit / --data)")
        check_writable(self.run_dir)
        if self.cfg.agent == "model" and (self.executor is None or self.executor.same_machine):
            # a dead or wrong model server: before the folder
            await check_endpoint(settings(self.cfg.run, {}))
        todo = self._open_folder(rows)
        await self._open(todo)
        total = len(rows) * self.repeats * len(self.modes)
        self.progress.on_start(total, total - len(todo), self.run_dir, self.cfg.concurrency)
        t0 = time.time()
        try:
            await self._run_all(todo)
        except BaseException:
            await self._close(t0, stopped=True)
            raise
        summary = await self._close(t0, stopped=False)
        return BenchResult(self.run_dir, summary, latest(self.store.load()))

    async def _run_all(self, todo: list[tuple[Row, int, str]]) -> None:
        """Every sample to its record, `concurrency` at a time; the first that stops the run cancels the others."""
        gate = asyncio.Semaphore(self.cfg.concurrency)
        tasks = [asyncio.ensure_future(self._one(gate, *s)) for s in todo]
        try:
            for fut in asyncio.as_completed(tasks):
                await fut
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _one(self, gate: asyncio.Semaphore, row: Row, k: int, mode: str) -> None:
        async with gate:
            pool = self.samples.session.pool
            if mode == "sandbox" and pool is not None:
                self._sandbox_samples_left -= 1
                pool.expect(self._sandbox_samples_left + 1)  # this one included
            self.progress.on_sample_start(row.id, mode, k)
            cut_off = self._cut_off(row.id, mode, k)
            record = await (self.samples.run(row, k, mode, cut_off) if self.executor is None
                            else self.executor.run(self, row, k, mode, cut_off))
        self._keep(record)

    def _cut_off(self, row_id: str, mode: str, k: int) -> bool:
        """An earlier session was killed or stopped while running the sample: its folder is there, without
        a record."""
        return (row_id, mode, k) not in self._recorded and (self.run_dir / layout.sample_dir(row_id, mode, k)).is_dir()

    def _keep(self, record: SampleRecord) -> None:
        """Append the record, tell the progress, and stop the run where the record says so."""
        data = record.as_dict()
        try:
            self.store.append(data)
        except OSError as e:
            raise self.unwritable(e) from e
        self._finished += 1
        self._infra_streak = self._infra_streak + 1 if data.get("error") else 0
        self.progress.on_sample(data)
        self._watch_tool_use(data)
        if record.engine_gone is not None and self._stop is None:
            self._stop = EngineOutage(record.engine_gone)
        if self._stop is not None:
            raise self._stop
        if self._infra_streak >= MAX_CONSECUTIVE_INFRA:
            raise BenchAborted(f"{MAX_CONSECUTIVE_INFRA} samples in a row failed for infrastructure reasons; "
                               f"last: {data['error']}. Stopping; fix it and --resume {self.run_dir}")

    async def _close(self, t0: float, stopped: bool) -> Optional[dict]:
        """Give back the session and the executor, then write the summary of what is recorded. After a stop,
        a summary that cannot be written never takes the place of why the run stopped."""
        await self.samples.close()
        if self.executor is not None:
            await self.executor.close()
        try:
            return self.write_summary(session_wall_s=time.time() - t0, session_samples=self._finished)
        except OSError as e:
            if stopped:
                return None
            raise self.unwritable(e) from e

    def _watch_tool_use(self, record: dict) -> None:
        """Say once, as soon as it is clear, that most sandbox samples make no tool call: the run may be
        measuring a model without its tools (a server that drops them), and the user may stop it."""
        if self._warned_no_calls or not degraded.counted([record]):
            return
        self._tool_use[0] += record["tool_calls"] == 0
        self._tool_use[1] += 1
        none, of = self._tool_use
        if of >= degraded.EARLY_SAMPLES and degraded.is_most(none, of):
            self._warned_no_calls = True
            self.progress.on_status("warning: " + degraded.warning(self.task.name, none, of, self.cfg.run.tool_format,
                                                                   so_far=True))

    def write_summary(self, session_wall_s: float = 0.0, session_samples: int = 0) -> dict:
        records = latest(self.store.load())
        summary = stats.summarize(records)
        summary["warnings"] = degraded.warnings(summary["tasks"], self.cfg.run.tool_format)
        session = self.samples.session if self.samples else None
        price, pool = (session.price, session.pool) if session else (None, None)
        # an executor whose workers ran the sandboxes says what their pools and engines did
        elsewhere = self.executor.session_summary() if self.executor is not None else {}
        summary.update(task=self.task.name, model=self.model, price=price.model_dump() if price else None,
                       modes=self.modes, repeats=self.repeats, samples=len(records),
                       errors=sum(1 for r in records if r.get("error")), updated_at=now_iso(),
                       session={"samples": session_samples, "wall_s": round(session_wall_s, 2),
                                "samples_per_min": round(session_samples / session_wall_s * 60, 2)
                                if session_wall_s > 0 else None,
                                **elsewhere,
                                "engine_outages": (self.samples.engine.outages if self.samples else [])
                                + elsewhere.get("engine_outages", []),
                                **({"sandbox_pool": pool.stats.summary()} if pool else {})})
        write_atomic(self.run_dir / layout.SUMMARY, json.dumps(summary, indent=1))  # a full disk keeps the old one
        return summary


def resumed_config(cfg: BenchConfig, resume: Optional[Path], concurrency: Optional[int]) -> BenchConfig:
    """The settings a run goes on with: a resumed run's own (with the credentials given again)."""
    if resume is None:
        return cfg
    cfg = _with_credentials(load_bench_config(resume), cfg)
    return cfg.model_copy(update={"concurrency": concurrency}) if concurrency else cfg


async def run_bench(cfg: BenchConfig, progress: Optional[BenchProgress] = None,
                    resume: Optional[Path] = None, concurrency: Optional[int] = None,
                    executor: Optional[Any] = None) -> BenchResult:
    """Run (or, with `resume`, finish) a benchmark, on this machine or through `executor` (an executor
    of distributed/, e.g. over a Ray cluster: distributed.bench.run_bench), which it closes."""
    cfg = resumed_config(cfg, resume, concurrency)
    try:
        return await BenchRun(cfg, run_dir=resume, progress=progress, executor=executor).run()
    finally:
        if executor is not None:
            await executor.close()
