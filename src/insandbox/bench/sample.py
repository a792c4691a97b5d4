"""One benchmark sample, from its first attempt to its record: `SampleRunner`.

A sample is one (row, repeat, mode). It runs as an ordinary run of a Session (runs/session.py) in
its own run folder, samples/<mode>/<id>/r<k> (runs/layout.py). Failures of the infrastructure (the
model server, the engine, a sandbox stopped from outside) are tried again, backing off, up to
`retries` times; if they persist the sample is recorded as an error (counted as wrong in the
accuracy, and shown beside it). A sandbox that died of what ran in it (the host saw nothing else
stop it: sandbox/docker/backend.py `_dead_reason`) is the model's doing: scored 0, never tried
again, so breaking the sandbox on a hard item never beats a wrong answer. A sample that ends on
the model's terms is scored. The record (`SampleRecord`) says what every attempt cost and why each failed.

The Docker engine going away (a daemon restart) is waited out rather than counted: after a
sandbox failure the runner asks the engine whether it is there (`EngineWatch`); if not, every
sandbox sample waits (backing off, at most `engine_wait_s`) until it answers again, the containers
that could not be removed meanwhile are removed, and the samples the outage cut off run again
without using up their retries (each failed attempt stays listed in the record's
`failed_attempts`). An engine that does not come back is recorded on the sample that saw it
(`SampleRecord.engine_gone`), and whoever schedules the samples stops the run.

Samples run here for the local scheduler (runner.py) and on each node of a Ray cluster
(distributed/bench.py), the same way.
"""
from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..analysis.accounting import token_breakdown
from ..config import ConfigError
from ..core import defaults
from ..core.episode import ExitReason
from ..core.errors import InsandboxError
from ..core.trajectory import Trajectory, now_iso
from ..models.base import ModelClient
from ..runs import layout
from ..runs.session import RunResult, Session, Verify
from ..sandbox import backend_class
from .data import Row
from .scorers import Scorer
from .tasks import TaskSpec

MAX_OUTAGE_RETRIES = 3  # attempts of one sample cut off by engine outages that are not counted as retries
HOST_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)


class BenchAborted(InsandboxError, RuntimeError):
    """The benchmark cannot go on (the engine gone past its wait, a run folder that takes nothing more)."""


class EngineOutage(BenchAborted):
    """The sandbox engine did not answer again within the wait."""


class RunFolderUnwritable(BenchAborted):
    """The run folder cannot be written (disk full, quota, read-only): nothing more can be recorded."""


def is_host_write_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in HOST_WRITE_ERRNOS


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


# ---------------------------------------------------------------------- the record
@dataclass
class FailedAttempt:
    attempt: int
    error: str
    engine_away: bool = False  # the engine went away during it

    def as_dict(self) -> dict:
        return {"attempt": self.attempt, "error": self.error, **({"engine_away": True} if self.engine_away else {})}


@dataclass
class Verdict:
    """What the scorer made of a sample's answer."""

    answer: str
    extracted: str  # what the scorer compared with the ground truth
    method: str
    approximate: bool  # a stand-in for the paper's scoring (no judge given)
    detail: dict


@dataclass
class RunFigures:
    """The figures of a sample's last attempt, from its trajectory."""

    exit_detail: Optional[str]
    steps: int
    tool_calls: int
    prompt_tokens: int
    model_time_s: float
    tool_time_s: float
    wall_time_s: float
    tokens: dict  # analysis.accounting.token_breakdown

    @classmethod
    def of(cls, traj: Trajectory) -> RunFigures:
        t, tokens = traj.totals, token_breakdown(traj.model_dump(include={"steps"}))
        return cls(traj.exit_detail, t.steps, t.tool_calls, t.prompt_tokens, round(t.model_time_s, 4),
                   round(t.tool_time_s, 4), round(t.wall_time_s, 4), tokens)

    def as_dict(self) -> dict:
        return {"exit_detail": self.exit_detail, "steps": self.steps, "tool_calls": self.tool_calls,
                "prompt_tokens": self.prompt_tokens, "model_time_s": self.model_time_s,
                "tool_time_s": self.tool_time_s, "wall_time_s": self.wall_time_s, **self.tokens}


@dataclass
class SampleRecord:
    """One sample's line of results.jsonl (`as_dict`)."""

    id: str
    task: str
    mode: str
    repeat: int
    attempts: int  # every attempt, those of an earlier session that was cut off included
    started_at: float
    trajectory: str  # relative to the benchmark folder
    cost_usd: Optional[float]  # of the last attempt; None: the model's price is unknown
    exit_reason: Optional[ExitReason]
    score: Optional[float] = None
    error: Optional[str] = None  # the infrastructure failed; None when the sample was scored
    finished_at: Optional[float] = None
    resumed_attempts: int = 0  # attempts of an earlier session that was cut off while running it
    retry_cost_usd: Optional[float] = None  # what the failed attempts before the last cost
    failed_attempts: list[FailedAttempt] = field(default_factory=list)
    verdict: Optional[Verdict] = None  # when scored
    figures: Optional[RunFigures] = None  # when the last attempt left a trajectory
    node: Optional[str] = None  # the Ray node that ran it (distributed/bench.py)
    node_address: Optional[str] = None
    lost_nodes: list = field(default_factory=list)  # Ray nodes lost while they ran it
    engine_gone: Optional[str] = None  # not recorded: the engine did not come back, so the run stops

    def as_dict(self) -> dict:
        rec = {"id": self.id, "task": self.task, "mode": self.mode, "repeat": self.repeat, "attempts": self.attempts,
               "started_at": self.started_at, "finished_at": self.finished_at, "trajectory": self.trajectory}
        if self.resumed_attempts:
            rec.update(resumed_attempts=self.resumed_attempts, cut_off_earlier=True)
        rec["cost_usd"] = self.cost_usd
        if self.retry_cost_usd is not None:
            rec["retry_cost_usd"] = self.retry_cost_usd
        if self.failed_attempts:
            rec["failed_attempts"] = [f.as_dict() for f in self.failed_attempts]
        rec["score"] = self.score
        if self.verdict is not None:
            v = self.verdict
            rec.update(answer=v.answer, extracted=v.extracted, score_method=v.method, approximate=v.approximate,
                       score_detail=v.detail)
        rec.update(error=self.error, exit_reason=self.exit_reason)
        if self.figures is not None:
            rec.update(self.figures.as_dict())
        if self.node is not None:
            rec.update(node=self.node, node_address=self.node_address)
        if self.lost_nodes:
            rec["lost_nodes"] = self.lost_nodes
        return rec


# ---------------------------------------------------------------------- running one
@dataclass
class _Tries:
    """A sample's attempts so far."""

    started: float = field(default_factory=time.time)
    n: int = 0
    outages: int = 0  # attempts cut off by the engine going away: not counted as retries
    costs: list[float] = field(default_factory=list)  # of every attempt, in order (the last is the record's own)
    failures: list[FailedAttempt] = field(default_factory=list)
    result: Optional[RunResult] = None  # of the last attempt, if it got as far as a run
    crash: Optional[str] = None  # why the last attempt did not even run
    gone: Optional[EngineOutage] = None  # the engine did not come back

    @property
    def broke_itself(self) -> bool:
        """The last attempt's sandbox died of what ran in it (the host saw nothing else stop it): the
        model's doing, scored 0 like a wrong answer and never tried again."""
        r = self.result
        return (self.crash is None and r is not None and r.exit_reason is ExitReason.SANDBOX_ERROR
                and r.trajectory.exit_cause == "sandbox")

    @property
    def failed(self) -> bool:
        """The last attempt failed (the model server or the infrastructure): an answer it left does not count."""
        r = self.result
        if self.broke_itself:
            return False
        return self.crash is not None or r.exit_reason is None or r.exit_reason.is_failure or r.outputs_lost is not None

    @property
    def error(self) -> str:
        if self.crash is not None:
            return self.crash
        reason = self.result.exit_reason
        if self.result.outputs_lost is not None and reason is not None and not reason.is_failure:
            return f"{reason}, but the outputs were not collected: {self.result.outputs_lost}"
        return f"{reason}: {self.result.trajectory.exit_detail}"


class SampleRunner:
    """Runs benchmark samples in `session`'s runs, each to its record: retries with backoff for failures
    of the infrastructure, engine outages waited out (`engine`, shared by the samples of a run),
    costs, scoring. As many samples at once as the caller likes; `close` gives back what the session
    and the judge hold."""

    def __init__(self, session: Session, task: TaskSpec, scorer: Scorer, run_dir: Path, *,
                 retries: int = defaults.SAMPLE_RETRIES, retry_backoff_s: float = defaults.RETRY_BACKOFF_S,
                 engine: Optional[EngineWatch] = None,
                 on_unwritable: Optional[Callable[[OSError], BaseException]] = None,
                 judge: Optional[ModelClient] = None, verify: Optional[Verify] = None):
        self.session, self.task, self.scorer = session, task, scorer
        self.run_dir = Path(run_dir)  # the benchmark folder the samples' folders go in
        self.retries, self.retry_backoff_s = retries, retry_backoff_s
        self.engine = engine or EngineWatch(session.cfg.backend, defaults.ENGINE_WAIT_S, session.observer.on_status,
                                            self.run_dir)
        self.on_unwritable = on_unwritable or self._unwritable
        self.judge = judge  # the scorer's model client, closed with the runner
        # a verifier that looks at each sandbox sample's sandbox before it goes (a Harbor task's): its
        # reward is the score, and a verification that failed is the sample's error, never a 0
        self.verify = verify

    async def run(self, row: Row, repeat: int, mode: str, cut_off: bool = False) -> SampleRecord:
        """Run one sample to its record. `cut_off`: an earlier session was stopped while running it (its
        folder is there, without a record), which counts as one attempt more."""
        tries = _Tries()
        while await self._try_once(row, mode, repeat, tries):
            pass
        return await self._record(row, repeat, mode, tries, cut_off)

    async def close(self) -> None:
        self.engine.close()
        await self.session.close()
        if self.judge is not None:
            try:
                await self.judge.close()
            except Exception:
                pass

    async def _try_once(self, row: Row, mode: str, repeat: int, tries: _Tries) -> bool:
        """One attempt; whether to make another."""
        sandbox = mode == "sandbox"
        if sandbox and not await self._engine_ready(tries):
            return False
        began = time.monotonic()
        await self._attempt(row, mode, repeat, tries)
        if not tries.failed:
            return False
        tries.failures.append(FailedAttempt(tries.n, tries.error))
        if sandbox and (tries.crash or tries.result.exit_reason is not ExitReason.MODEL_ERROR):
            away = await self._engine_away(began, tries)
            if tries.gone is not None:
                return False
            if away and tries.outages < MAX_OUTAGE_RETRIES:
                tries.outages += 1
                return True  # the engine is back: run it again at once
        if tries.n - tries.outages > self.retries:
            return False
        await asyncio.sleep(min(self.retry_backoff_s * 2 ** (tries.n - tries.outages - 1), 30))
        return True

    async def _engine_ready(self, tries: _Tries) -> bool:
        """No container starts while the engine is known to be away; False: it did not come back."""
        try:
            await self.engine.ready()
        except EngineOutage as e:
            if not tries.n:
                raise
            tries.gone = e
            return False
        return True

    async def _engine_away(self, began: float, tries: _Tries) -> bool:
        """Whether the engine went away during the failed attempt (marked on it)."""
        try:
            away = await self.engine.outage_during(began)
        except EngineOutage as e:
            away, tries.gone = True, e
        tries.failures[-1].engine_away = away
        return away

    async def _attempt(self, row: Row, mode: str, repeat: int, tries: _Tries) -> None:
        tries.n += 1
        try:
            folder = self.run_dir / layout.sample_dir(row.id, mode, repeat)
            task = self.session.task(row.problem_statement, row.id, row.input_files, row.input_dir)
            verify = self.verify if mode == "sandbox" else None
            tries.result, tries.crash = await self.session.run(task, folder, mode, verify=verify), None
            tries.costs.append(tries.result.trajectory.totals.cost_usd or 0.0)
        except (ConfigError, FileNotFoundError):
            raise
        except Exception as e:  # the sandbox could not even start, the engine went away, ...
            if is_host_write_error(e):  # no retry can help: the run folder takes nothing more
                raise self.on_unwritable(e) from e
            tries.result, tries.crash = None, f"{type(e).__name__}: {e}"
            tries.costs.append(0.0)  # the run failed before the model was asked

    async def _record(self, row: Row, repeat: int, mode: str, tries: _Tries, cut_off: bool) -> SampleRecord:
        rec = SampleRecord(id=row.id, task=self.task.name, mode=mode, repeat=repeat, attempts=tries.n + cut_off,
                           started_at=tries.started, trajectory=layout.sample_trajectory(row.id, mode, repeat),
                           resumed_attempts=int(cut_off), failed_attempts=tries.failures, **self._costs(tries),
                           exit_reason=tries.result.exit_reason if tries.result else ExitReason.SANDBOX_ERROR)
        if tries.failed:
            rec.error = tries.error
            if tries.gone is not None:
                rec.error += f" (the sandbox engine did not answer again within {self.engine.max_wait_s:g} s)"
                rec.engine_gone = str(tries.gone)
        elif tries.broke_itself:  # the model's doing: a wrong answer, whatever it wrote first
            detail = {"exit_cause": "sandbox", "why": tries.result.trajectory.exit_detail}
            rec.score, rec.verdict = 0.0, Verdict(tries.result.answer or "", "", "sandbox broke itself", False, detail)
        elif self.verify is not None and mode == "sandbox":
            self._verified(rec, tries.result)
        else:
            rec.score, rec.verdict = await self._score(tries.result.answer or "", row)
        if tries.result is not None:
            rec.figures = RunFigures.of(tries.result.trajectory)
        rec.finished_at = time.time()
        return rec

    @staticmethod
    def _verified(rec: SampleRecord, result: RunResult) -> None:
        """The verifier's reward as the score; a verification that failed is the sample's error."""
        v = result.trajectory.verification
        if v is None:
            rec.error = "not verified: the verifier did not run"
        elif v.get("error"):
            rec.error = f"verification failed: {v['error']}"
        else:
            source = (v.get("source") or "").rsplit("/", 1)[-1]
            rec.score = v["reward"]
            rec.verdict = Verdict(result.answer or "", "", f"verifier ({source})", False,
                                  {"rewards": v.get("rewards"), "exit_code": v.get("exit_code"),
                                   "separate": v.get("separate")})

    def _costs(self, tries: _Tries) -> dict:
        price = self.session.price
        if price is None or not price.known:  # an unknown price leaves the cost unknown, never 0
            return {"cost_usd": None}
        earlier = sum(tries.costs[:-1])
        return {"cost_usd": tries.costs[-1] if tries.costs else 0.0,
                "retry_cost_usd": round(earlier, 10) if earlier else None}

    async def _score(self, answer: str, row: Row) -> tuple[Optional[float], Verdict]:
        scored = await self.scorer.score(answer, row)
        return scored.score, Verdict(answer, scored.extracted, scored.method, self.scorer.approximate, scored.detail)

    def _unwritable(self, error: OSError) -> RunFolderUnwritable:
        return RunFolderUnwritable(f"cannot write the run folder: {error.strerror or error} "
                                   f"({error.filename or self.run_dir})")
