"""`insandbox bench`: run a task's rows in sandbox mode, plain mode or both, concurrently.

A sample is one (row, repeat, mode). Each runs as an ordinary `arun` (its own sandbox,
its own run folder under samples/), all sharing one model client; up to `concurrency`
are in flight. The moment a sample is scored its record is appended to results.jsonl,
so a killed run loses nothing and `--resume RUN_DIR` runs only what is missing.
Failures of the infrastructure (the model server or the sandbox) are retried, and if
they persist the sample is recorded as an error, apart from wrong answers; ten such
failures in a row stop the run, since something is down.

The Docker engine going away (a daemon restart) is waited out rather than counted: after a
sandbox failure the runner asks the engine whether it is there; if not, every sandbox sample
waits (backing off, at most `engine_wait_s`) until it answers again, the containers that
could not be removed meanwhile are removed, and the samples the outage cut off run again
without using up their retries (each failed attempt stays listed in the record's
`failed_attempts`). An engine that does not come back stops the run, resumable.

A run folder that cannot be written (disk full, read-only) stops the run at once with what,
where and how to resume: every record already written stays whole.
"""
from __future__ import annotations

import asyncio
import datetime as _dt
import errno
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Protocol

from pydantic import BaseModel, ConfigDict, Field

from ..analysis.accounting import token_breakdown
from ..config import ConfigError, RunConfig, restored
from ..core.episode import ExitReason
from ..core.extras import require
from ..core.redact import redact, secrets_in
from ..core.trajectory import now_iso
from ..models.base import ModelClient
from ..models.openai_compat import OpenAIChatClient
from ..models.pricing import Price, PriceTable, load_prices
from ..prompts import PromptConfig, load_prompt_overrides
from ..runs.session import arun, make_model_client, prepare_sandbox, price_of
from ..sandbox import backend_class
from ..sandbox.pool import SandboxPool
from . import degraded, stats
from .data import Row, load_rows
from .scorers import JudgeSettings, Scorer, make_scorer, modules_needed
from .store import ResultStore, latest, sample_key, write_atomic
from .tasks import TaskSpec, load_task

MAX_CONSECUTIVE_INFRA = 10
MAX_OUTAGE_RETRIES = 3  # attempts of one sample cut off by engine outages that are not counted as retries
BENCH_FILE = "bench.json"
SUMMARY_FILE = "summary.json"
HOST_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)


class BenchAborted(RuntimeError):
    pass


class EngineOutage(BenchAborted):
    """The sandbox engine did not answer again within the wait."""


class RunFolderUnwritable(BenchAborted):
    """The run folder cannot be written (disk full, quota, read-only): nothing more can be recorded."""


def is_host_write_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in HOST_WRITE_ERRNOS


class BenchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str  # a built-in task name or a task YAML path
    data: Optional[Path] = None  # local JSON/JSONL rows instead of the task's hub dataset
    mode: Literal["sandbox", "llm", "both"] = "sandbox"
    repeats: Optional[int] = Field(default=None, ge=1)  # default: the task's
    limit: Optional[int] = Field(default=None, ge=1)
    ids: Optional[list[str]] = None
    concurrency: int = Field(default=8, ge=1)
    retries: int = Field(default=2, ge=0)  # per sample, for infrastructure failures
    retry_backoff_s: float = Field(default=2.0, ge=0)  # doubled at each retry, at most 30 s
    engine_wait_s: float = Field(default=300.0, ge=0)  # how long sandbox samples wait for an engine that went away
    pool: bool = True  # samples take started sandboxes from a pool (sandbox/pool.py) instead of starting their own
    recycle: bool = True  # the pool recycles a sandbox between samples where the engine allows (sandbox/recycle.py)
    pool_size: Optional[int] = Field(default=None, ge=1)  # sandboxes alive at most; default: concurrency + a few
    max_uses: int = Field(default=100, ge=1)  # samples one recycled sandbox serves before a fresh one replaces it
    output_dir: Optional[Path] = None
    runs_root: Path = Path("runs")
    judge_model: Optional[str] = None
    judge_base_url: Optional[str] = None
    judge_api_key: Optional[str] = Field(default=None, repr=False)
    judge_prompt: Optional[Path] = None
    run: RunConfig = Field(default_factory=RunConfig)  # model, sandbox and loop settings of every sample

    def public(self) -> dict:
        data = self.model_dump(mode="json", exclude={"judge_api_key", "run"})
        data["run"] = self.run.public()
        data["judge_base_url"] = redact(self.judge_base_url, self.run.secrets() | secrets_in(self.judge_api_key))
        return data


class BenchProgress(Protocol):
    def on_status(self, text: str) -> None: ...

    def on_progress(self, text: str) -> None: ...  # transient lines, e.g. of a first-use image build

    def on_start(self, total: int, already_done: int, run_dir: Path, concurrency: int) -> None: ...

    def on_sample_start(self, row_id: str, mode: str, repeat: int) -> None: ...  # it got a slot and runs now

    def on_sample(self, record: dict) -> None: ...


class _Quiet:
    def on_status(self, text: str) -> None:
        pass

    def on_progress(self, text: str) -> None:
        pass

    def on_start(self, total: int, already_done: int, run_dir: Path, concurrency: int) -> None:
        pass

    def on_sample_start(self, row_id: str, mode: str, repeat: int) -> None:
        pass

    def on_sample(self, record: dict) -> None:
        pass


@dataclass
class BenchResult:
    run_dir: Path
    summary: dict
    records: list[dict] = field(default_factory=list)


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:120] or "_"


def default_run_dir(root: Path, task: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"bench-{safe_name(Path(task).stem)}-{stamp}-{uuid.uuid4().hex[:6]}"


def load_bench_config(run_dir: Path) -> BenchConfig:
    path = Path(run_dir) / BENCH_FILE
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a benchmark run folder (no {BENCH_FILE})")
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


class EngineWatch:
    """Whether the sandbox engine is there, shared by the samples of a run.

    After a failed sandbox attempt a sample calls `outage_during`: if the engine does not answer,
    one waiter polls it (backing off from 0.5 s to 5 s, at most `max_wait_s`) and every sandbox
    sample waits with it (`ready`, before each attempt), so none burns its retries or starts a
    container while the engine is away. Once it answers, the containers whose removal failed
    meanwhile are removed. If it does not, EngineOutage reaches every waiting sample."""

    def __init__(self, backend: str, max_wait_s: float, on_status, run_dir: Path):
        self.backend = backend_class(backend)
        self.max_wait_s = max_wait_s
        self.on_status = on_status
        self.run_dir = run_dir
        self.outages: list[dict] = []  # this session's: when, how long, containers removed afterwards
        self._waiting: Optional[asyncio.Future] = None
        self._last_back = float("-inf")  # monotonic time the last outage ended

    async def ready(self) -> None:
        """Return once the engine is not known to be away (raises EngineOutage if it never came back)."""
        if self._waiting is not None:
            await asyncio.shield(self._waiting)

    async def outage_during(self, since: float) -> bool:
        """After a sandbox failure of an attempt begun at `since` (monotonic): was the engine away
        meanwhile? If it is away now, return only once it answers again."""
        if self._waiting is None:
            if await self.backend.reachable():
                return since < self._last_back
            if self._waiting is None:
                self._waiting = asyncio.ensure_future(self._wait())
        await asyncio.shield(self._waiting)
        return True

    def close(self) -> None:
        """The run is over: stop waiting for the engine."""
        if self._waiting is not None and not self._waiting.done():
            self._waiting.cancel()

    async def _wait(self) -> None:
        t0, delay = time.monotonic(), 0.5
        self.on_status(f"the sandbox engine is not answering: sandbox samples wait for it (up to "
                       f"{self.max_wait_s:g} s)")
        while not await self.backend.reachable():
            waited = time.monotonic() - t0
            if waited >= self.max_wait_s:
                raise EngineOutage(f"the sandbox engine has not answered for {waited:.0f} s; stopping. Every "
                                   f"sample recorded so far is kept; start the engine (e.g. `dockerd &`, or `bash "
                                   f"scripts/setup.sh`) and finish the run with: insandbox bench --resume "
                                   f"{self.run_dir}")
            await asyncio.sleep(min(delay, max(self.max_wait_s - waited, 0.0)))
            delay = min(delay * 2, 5.0)
        removed = await self.backend.remove_unremoved()
        down_s = time.monotonic() - t0
        self.outages.append({"at": now_iso(), "waited_s": round(down_s, 2), "containers_removed": len(removed)})
        self._last_back = time.monotonic()
        self._waiting = None
        self.on_status(f"the sandbox engine answers again (waited {down_s:.0f} s); removed {len(removed)} "
                       "container(s) it had left; the samples it cut off run again")


class SampleExecutor(Protocol):
    """Where samples run instead of this process (e.g. distributed/bench.py: over a Ray cluster).
    `run` gives the sample's record once its folder is in the run folder; the run appends it."""

    async def start(self, bench: BenchRun) -> None: ...

    async def run(self, bench: BenchRun, row: Row, repeat: int, mode: str) -> dict: ...

    async def close(self) -> None: ...


class BenchRun:
    def __init__(self, cfg: BenchConfig, run_dir: Optional[Path] = None, progress: Optional[BenchProgress] = None,
                 executor: Optional[SampleExecutor] = None, task: Optional[TaskSpec] = None,
                 prompts: Optional[PromptConfig] = None):
        """`task` and `prompts`, when given, stand for the files `cfg` names (a Ray node runs
        samples of a run whose files are on the driver's machine)."""
        self.cfg = cfg
        self.progress = progress or _Quiet()
        self.executor = executor  # None: samples run here
        self.task: TaskSpec = task or load_task(cfg.task)
        self.prompts: PromptConfig = prompts or self.task.prompts()
        if cfg.run.prompt_config and prompts is None:  # the user's file replaces the keys it sets, the task the rest
            self.prompts = self.prompts.model_copy(update=load_prompt_overrides(cfg.run.prompt_config))
        self.run_dir = Path(run_dir or cfg.output_dir or default_run_dir(cfg.runs_root, cfg.task))
        self.store = ResultStore(self.run_dir)
        self.modes = ["sandbox", "llm"] if cfg.mode == "both" else [cfg.mode]
        self.repeats = cfg.repeats or self.task.repeats
        explicit = "max_steps" in cfg.run.model_fields_set
        self.max_steps = cfg.run.max_steps if explicit or not self.task.max_steps else self.task.max_steps
        self.client: Optional[ModelClient] = None
        self.judge: Optional[OpenAIChatClient] = None
        self.scorer: Optional[Scorer] = None
        self.price: Optional[Price] = None  # of the model's calls, the same for every sample
        self._prices: Optional[PriceTable] = None
        self.engine = EngineWatch(cfg.run.backend, cfg.engine_wait_s, self.progress.on_status, self.run_dir)
        self._infra_streak = 0
        self._stop: Optional[BenchAborted] = None  # set by a sample whose failure stops the run
        self._recorded: set[tuple[str, str, int]] = set()  # samples with a record when the session began
        self.pool: Optional[SandboxPool] = None
        self._sandbox_samples_left = 0  # sandbox samples that have not begun yet (the pool's demand)
        self._tool_use = [0, 0]  # this session's sandbox samples: [without a tool call, counted] (degraded.py)
        self._warned_no_calls = False

    # ------------------------------------------------------------------ set-up
    def _save_config(self, rows: list[Row]) -> None:
        path = self.run_dir / BENCH_FILE
        if path.is_file():
            saved = json.loads(path.read_text(encoding="utf-8"))
            if saved.get("row_ids") != [r.id for r in rows]:
                raise ConfigError(f"{self.run_dir} was run on other rows; resume with the same data and task")
            return
        write_atomic(path, json.dumps({"config": self.cfg.public(), "task": self.task.model_dump(),
                                       "row_ids": [r.id for r in rows], "modes": self.modes, "repeats": self.repeats,
                                       "max_steps": self.max_steps, "created_at": now_iso()},
                                      indent=1, ensure_ascii=False))

    def _unwritable(self, error: OSError) -> RunFolderUnwritable:
        where = error.filename or self.run_dir
        try:
            recorded = len(latest(self.store.load()))
        except OSError:
            recorded = "the"
        return RunFolderUnwritable(
            f"cannot write the run folder: {error.strerror or error} ({where}). The run stopped; {recorded} "
            f"sample(s) already recorded are kept whole in {self.store.path}. Free some space (or fix the device) "
            f"and finish the run with: insandbox bench --resume {self.run_dir}")

    async def _open_clients(self) -> None:
        run = self.cfg.run.with_environment()
        self.client = await make_model_client(run)
        self.price = price_of(self._prices or load_prices(run.prices), run, self.client.name)
        if not self.price.known:  # said once here; each record's cost is None
            self.progress.on_status(f"{self.price.describe()}: sample costs are recorded as unknown (add it to a "
                                    "price file: --prices FILE)")
        judge = None
        if self.cfg.judge_model:
            self.judge = OpenAIChatClient(self.cfg.judge_model, base_url=self.cfg.judge_base_url,
                                          api_key=self.cfg.judge_api_key or run.api_key, temperature=0.0,
                                          max_retries=run.max_retries)
            prompt = self.cfg.judge_prompt.read_text(encoding="utf-8") if self.cfg.judge_prompt else None
            judge = JudgeSettings(self.judge, prompt)
        self.scorer = make_scorer(self.task.scorer, self.task.offline_scorer, judge)

    async def _close_clients(self) -> None:
        for c in (self.client, self.judge):
            if c is not None:
                try:
                    await c.close()
                except Exception:
                    pass

    def _make_pool(self, prestart: bool = True) -> Optional[SandboxPool]:
        """One pool for the run's sandbox samples (None with --no-pool: each starts its own).
        `prestart=False` where the demand is not known (a Ray node): starts only when a sample asks."""
        if not self.cfg.pool:
            return None
        spec = self.cfg.run.env_config(self.prompts, f"bench-{uuid.uuid4().hex[:6]}").sandbox_spec()
        c = self.cfg.concurrency
        return SandboxPool(spec, self.cfg.run.backend, size=self.cfg.pool_size or c + min(c, 8),
                           recycle=self.cfg.recycle, max_uses=self.cfg.max_uses, prestart=prestart)

    async def _close_pool(self) -> None:
        if self.pool is not None:
            try:
                await self.pool.close(self.cfg.engine_wait_s)
            except Exception as e:  # what could not be removed stays for `insandbox clean`
                self.progress.on_status(f"could not remove every pooled sandbox: {e}")

    # ------------------------------------------------------------------ one sample
    async def _run_sample(self, row: Row, repeat: int, mode: str) -> dict:
        rel = Path("samples") / mode / safe_name(row.id) / f"r{repeat}"
        run = self.cfg.run
        overrides = {"mode": mode, "output_dir": self.run_dir / rel, "max_steps": self.max_steps}
        started, attempts, result, crash = time.time(), 0, None, None
        costs: list[float] = []  # of every attempt, in order (the last one is the record's own)
        sandbox = mode == "sandbox"
        failures: list[dict] = []  # every failed attempt, in order
        outages = 0  # attempts cut off by the engine going away: not counted as retries
        gone: Optional[EngineOutage] = None  # the engine did not come back: record this sample, then stop
        # an earlier session was killed or stopped while running it: its folder is there, without a record
        cut_off = int((row.id, mode, repeat) not in self._recorded and (self.run_dir / rel).is_dir())
        while True:
            if sandbox:
                try:
                    await self.engine.ready()  # no container starts while the engine is known to be away
                except EngineOutage as e:
                    if not attempts:
                        raise
                    gone = e
                    break
            attempts += 1
            began = time.monotonic()
            try:
                result = await arun(row.problem_statement, run, model_client=self.client, prompts=self.prompts,
                                    input_files=row.input_files, task_id=row.id, prepared=True, price=self.price,
                                    sandbox_pool=self.pool if sandbox else None, **overrides)
                crash = None
                costs.append(result.trajectory.totals.cost_usd or 0.0)
            except (ConfigError, FileNotFoundError):
                raise
            except Exception as e:  # the sandbox could not even start, the engine went away, ...
                if is_host_write_error(e):  # no retry can help: the run folder takes nothing more
                    raise self._unwritable(e) from e
                result, crash = None, f"{type(e).__name__}: {e}"
                costs.append(0.0)  # arun failed before the model was asked
            failed = crash is not None or result.exit_reason is None or result.exit_reason.is_failure
            if not failed:
                break
            error = crash or f"{result.exit_reason}: {result.trajectory.exit_detail}"
            failures.append({"attempt": attempts, "error": error})
            if sandbox and (crash or result.exit_reason is not ExitReason.MODEL_ERROR):
                try:
                    away = await self.engine.outage_during(began)
                except EngineOutage as e:
                    failures[-1]["engine_away"] = True
                    gone = e
                    break
                if away:
                    failures[-1]["engine_away"] = True
                    if outages < MAX_OUTAGE_RETRIES:
                        outages += 1
                        continue  # the engine is back: run it again at once
            if attempts - outages > self.cfg.retries:
                break
            await asyncio.sleep(min(self.cfg.retry_backoff_s * 2 ** (attempts - outages - 1), 30))
        record = {"id": row.id, "task": self.task.name, "mode": mode, "repeat": repeat,
                  "attempts": attempts + cut_off, "started_at": started, "finished_at": None,
                  "trajectory": str(rel / "trajectory.json")}
        if cut_off:
            record.update(resumed_attempts=cut_off, cut_off_earlier=True)
        if self.price is not None and self.price.known:  # an unknown price leaves the cost unknown, never 0
            record["cost_usd"] = costs[-1] if costs else 0.0
            if sum(costs[:-1]):
                record["retry_cost_usd"] = round(sum(costs[:-1]), 10)
        else:
            record["cost_usd"] = None
        if failures:
            record["failed_attempts"] = failures
        if gone is not None:
            error += f" (the sandbox engine did not answer again within {self.cfg.engine_wait_s:g} s)"
            self._stop = gone
        if failed:
            record.update(score=None, error=error,
                          exit_reason=result.exit_reason if result else ExitReason.SANDBOX_ERROR)
        else:
            answer = result.answer or ""
            scored = await self.scorer.score(answer, row)
            record.update(score=scored.score, answer=answer, extracted=scored.extracted, score_method=scored.method,
                          approximate=self.scorer.approximate, score_detail=scored.detail, error=None,
                          exit_reason=result.exit_reason)
        if result is not None:
            traj = result.trajectory
            record.update(exit_detail=traj.exit_detail, steps=traj.totals.steps, tool_calls=traj.totals.tool_calls,
                          prompt_tokens=traj.totals.prompt_tokens,
                          model_time_s=round(traj.totals.model_time_s, 4),
                          tool_time_s=round(traj.totals.tool_time_s, 4),
                          wall_time_s=round(traj.totals.wall_time_s, 4),
                          **token_breakdown(traj.model_dump(include={"steps"})))
        record["finished_at"] = time.time()
        return record

    # ------------------------------------------------------------------ the run
    async def run(self) -> BenchResult:
        # what the summary and the scorer import, checked before any sample runs (MissingExtra names the extra)
        require("bench", "scipy", *modules_needed(self.task.scorer, self.task.offline_scorer,
                                                  bool(self.cfg.judge_model)))
        self._prices = load_prices(self.cfg.run.prices)  # a bad price file stops the run before its folder exists
        rows = load_rows(self.cfg.data, self.task.dataset, self.task.config, self.task.split, self.cfg.ids,
                         self.cfg.limit)
        if not rows:
            raise ConfigError("no rows to run (check --ids / --limit / --data)")
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._save_config(rows)
            self.store.compact()  # one record per sample, also in files of older versions
        except OSError as e:
            if not is_host_write_error(e):
                raise
            raise self._unwritable(e) from e
        done = self.store.finished()
        self._recorded = {sample_key(r) for r in self.store.load()}
        todo = [(row, k, mode) for row in rows for k in range(self.repeats) for mode in self.modes
                if (row.id, mode, k) not in done]
        total = len(rows) * self.repeats * len(self.modes)
        if "sandbox" in self.modes and todo and self.executor is None:  # an executor's nodes prepare their own
            await prepare_sandbox(self.cfg.run, self.progress)
            self._sandbox_samples_left = sum(1 for s in todo if s[2] == "sandbox")
            self.pool = self._make_pool()
        await self._open_clients()
        if self.executor is not None and todo:
            await self.executor.start(self)
        self.progress.on_start(total, total - len(todo), self.run_dir, self.cfg.concurrency)
        gate = asyncio.Semaphore(self.cfg.concurrency)
        t0 = time.time()
        finished = 0

        async def one(row: Row, k: int, mode: str) -> None:
            nonlocal finished
            async with gate:
                if mode == "sandbox" and self.pool is not None:
                    self._sandbox_samples_left -= 1
                    self.pool.expect(self._sandbox_samples_left + 1)  # this one included
                self.progress.on_sample_start(row.id, mode, k)
                record = await (self._run_sample(row, k, mode) if self.executor is None
                                else self.executor.run(self, row, k, mode))
            try:
                self.store.append(record)
            except OSError as e:
                raise self._unwritable(e) from e
            finished += 1
            self._infra_streak = self._infra_streak + 1 if record.get("error") else 0
            self.progress.on_sample(record)
            self._watch_tool_use(record)
            if self._stop is not None:
                raise self._stop
            if self._infra_streak >= MAX_CONSECUTIVE_INFRA:
                raise BenchAborted(f"{MAX_CONSECUTIVE_INFRA} samples in a row failed for infrastructure reasons; "
                                   f"last: {record['error']}. Stopping; fix it and --resume {self.run_dir}")

        tasks = [asyncio.ensure_future(one(*s)) for s in todo]
        try:
            for fut in asyncio.as_completed(tasks):
                await fut
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.engine.close()
            await self._close_pool()
            await self._close_clients()
            if self.executor is not None:
                await self.executor.close()
            try:  # the summary of what is recorded; never in place of why the run stopped
                self.write_summary(session_wall_s=time.time() - t0, session_samples=finished)
            except OSError:
                pass
            raise
        await self._close_pool()
        await self._close_clients()
        if self.executor is not None:
            await self.executor.close()
        try:
            summary = self.write_summary(session_wall_s=time.time() - t0, session_samples=finished)
        except OSError as e:
            raise self._unwritable(e) from e
        return BenchResult(self.run_dir, summary, latest(self.store.load()))

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
        summary.update(task=self.task.name, model=getattr(self.client, "name", None) or self.cfg.run.model,
                       price=self.price.model_dump() if self.price else None,
                       modes=self.modes, repeats=self.repeats, samples=len(records),
                       errors=sum(1 for r in records if r.get("error")), updated_at=now_iso(),
                       session={"samples": session_samples, "wall_s": round(session_wall_s, 2),
                                "samples_per_min": round(session_samples / session_wall_s * 60, 2)
                                if session_wall_s > 0 else None, "engine_outages": self.engine.outages,
                                **({"sandbox_pool": self.pool.stats.summary()} if self.pool else {})})
        write_atomic(self.run_dir / SUMMARY_FILE, json.dumps(summary, indent=1))  # a full disk keeps the old one
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
