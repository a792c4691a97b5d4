"""Outcome rewards for context tasks: one scorer per qa_type, optional penalties, and a
computation that can neither hang nor raise (the trainer must never stall on a reward).

    result = await compute_reward(row, Outcome(answer="C\\n", exit_reason="submitted"), RewardConfig())
    result.value        # what the trainer optimises (correctness plus penalties)
    result.correct      # 0..1 before penalties
    result.detail       # what was compared, which penalties applied, an error if scoring failed

    compute_reward_sync(row, outcome, config)   # the same, blocking, from any thread
    start_reward_workers()                      # optional: start the scoring processes now

Modules: scoring.py picks the scorer (single_choice.py, multi_choice.py, open_answer.py,
numbers.py, paper.py; answer_part.py, characters.py, hedges.py, values.py, normalise.py and
options.py are what they share); penalties.py;
isolation.py runs scoring in worker processes that a timeout kills. The answer is scored only
when there is one and it is at most `max_answer_chars` long; longer answers score 0 unread.
"""
from __future__ import annotations

import atexit
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from pydantic import BaseModel, Field, model_validator

from .isolation import Reply, WorkerPool
from .penalties import FAILURE_EXITS, broken_sandbox_penalty, no_answer, penalties
from .scoring import SCORED_FIELDS

SCORINGS = ("strict", "paper")


class RewardConfig(BaseModel):
    # strict: the scorers below (the default); paper: the official LLM-in-Sandbox-RL reward (paper.py),
    # which pays for hedging as published
    scoring: Literal["strict", "paper"] = "strict"
    multi_choice: Literal["exact", "f1"] = "exact"  # exact set of letters, or set F1 (a wrong letter: 0)
    open: Literal["exact", "f1"] = "exact"  # normalised exact match, or token F1 (best alias)
    no_answer_penalty: float = 0.0  # added when the sandbox holds no answer file (or an empty one)
    max_steps_penalty: float = 0.0  # added when the episode ran out of steps (or was stuck)
    truncation_penalty: float = 0.0  # added when the response ran out of tokens
    # added when the time limit passed in the model's own commands (exit_cause "commands"); None: max_steps_penalty
    time_limit_penalty: Optional[float] = None
    # the reward of a sandbox broken by its own processes; None: the sum of the negative penalties above
    # (a value above that sum is lowered to it: breaking the sandbox never beats any other ending)
    broken_sandbox_penalty: Optional[float] = Field(default=None, le=0)
    timeout_s: float = Field(default=10.0, gt=0)  # a scorer taking longer gives error_value
    error_value: float = 0.0  # the correctness used when scoring failed or timed out (penalties still add)
    max_answer_chars: int = Field(default=10_000, gt=0)  # a longer answer scores 0 without being read

    @model_validator(mode="after")
    def _paper_is_whole(self) -> RewardConfig:
        if self.scoring == "paper":
            if self.multi_choice != "exact" or self.open != "exact":
                raise ValueError("scoring 'paper' fixes how every qa_type is scored: leave multi_choice and open "
                                 "unset")
            import importlib.util

            if importlib.util.find_spec("rouge_score") is None:
                raise ValueError("scoring 'paper' needs rouge-score (pip install rouge-score; in the rl extra)")
        return self


@dataclass
class Outcome:
    """How an episode ended, as far as the reward is concerned."""

    answer: Optional[str]  # the answer file's text; None when there was none
    exit_reason: str  # an insandbox.ExitReason value
    truncated: bool = False  # the response hit its token budget
    # a failure's: "sandbox" (its own processes broke it) or "infrastructure"; a time limit's: "commands" (the
    # model's tool calls took at least half the time) or "infrastructure"
    exit_cause: Optional[str] = None


@dataclass
class RewardResult:
    value: float
    correct: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)
    error: Optional[str] = None


@dataclass
class _Plan:
    """A reward before scoring: penalties known, and either a final correctness or a job."""

    config: RewardConfig
    penalties: dict[str, float]
    detail: dict[str, Any]
    correct: Optional[float] = None  # known without scoring (no answer, too long)
    job: Optional[list] = None  # the arguments of scoring.score_in_worker


def _plan(row: Any, outcome: Outcome, config: Optional[RewardConfig]) -> _Plan:
    config = config or RewardConfig()
    if isinstance(row, BaseModel):  # a TaskRow
        row = row.model_dump(mode="json")
    if not isinstance(row, dict):
        raise TypeError(f"a row is a dict (TaskRow.as_record()), got {type(row).__name__}")
    detail: dict[str, Any] = {"qa_type": row.get("qa_type") or "open", "exit_reason": str(outcome.exit_reason)}
    if broken_by_itself(outcome):  # the model's doing: never scored, never better than any other ending
        detail.update(broken_sandbox=True, why="the sandbox was broken by what ran in it: the answer is not read")
        return _Plan(config, {"broken_sandbox": broken_sandbox_penalty(config)}, detail, correct=0.0)
    applied = penalties(outcome, config)
    if str(outcome.exit_reason) in FAILURE_EXITS:
        detail["exit_failure"] = True  # says nothing about the model: a trainer leaves this rollout out
    plan = _Plan(config, applied, detail)
    if no_answer(outcome):
        detail["why"] = "no answer file" if outcome.answer is None else "empty answer file"
        plan.correct = 0.0
        return plan
    answer = outcome.answer
    if not isinstance(answer, str):
        raise TypeError(f"an answer is text, got {type(answer).__name__}")
    detail["answer_chars"] = len(answer)
    if len(answer) > config.max_answer_chars:
        detail["why"] = f"answer longer than {config.max_answer_chars} characters: not read"
        plan.correct = 0.0
        return plan
    fields = {k: row.get(k) for k in SCORED_FIELDS}
    if fields.get("options") or fields.get("qa_type") not in ("single-choice", "multi-choice"):
        fields["problem_statement"] = ""  # only a choice row without options reads its options there
    plan.job = [fields, answer, config.multi_choice, config.open, config.scoring]
    return plan


def broken_by_itself(outcome: Outcome) -> bool:
    """A sandbox_error that the sandbox's own processes caused (exit_cause "sandbox")."""
    return str(outcome.exit_reason) == "sandbox_error" and outcome.exit_cause == "sandbox"


def broken_sandbox_reward(row: dict, config: Optional[RewardConfig] = None) -> RewardResult:
    """What a rollout whose sandbox its own processes broke gets (no scoring: the sandbox is gone)."""
    return _finish(_plan(row, Outcome(None, "sandbox_error", exit_cause="sandbox"), config))


def _finish(plan: _Plan, reply: Optional[Reply] = None) -> RewardResult:
    detail, error = plan.detail, None
    correct = plan.correct
    if reply is not None:
        detail["scoring_s"] = round(reply.seconds, 6)
        if reply.error is None:
            correct = float(reply.result["correct"])
            detail.update(reply.result["detail"])
        else:
            error = reply.error
    return _result(plan.config, plan.penalties, detail, correct, error)


def _result(config: RewardConfig, applied: dict[str, float], detail: dict, correct: Optional[float],
            error: Optional[str]) -> RewardResult:
    detail["penalties"] = applied
    if error is not None:
        detail["error"] = error
        detail["error_value"] = config.error_value
        return RewardResult(config.error_value + sum(applied.values()), 0.0, detail, error)
    return RewardResult(correct + sum(applied.values()), correct, detail)


def _broken(e: Exception, config: Optional[RewardConfig], outcome: Any) -> RewardResult:
    """The reward of a call whose inputs could not even be read: error_value, penalties if possible."""
    config = config if isinstance(config, RewardConfig) else RewardConfig()
    try:
        applied = penalties(outcome, config)
    except Exception:
        applied = {}
    return _result(config, applied, {}, None, f"{type(e).__name__}: {e}")


async def compute_reward(row: dict, outcome: Outcome, config: Optional[RewardConfig] = None) -> RewardResult:
    """The reward of one rollout. Never raises (except on cancellation) and returns within
    config.timeout_s of scoring, plus the wait for a free worker when all are busy."""
    try:
        plan = _plan(row, outcome, config)
        if plan.job is None:
            return _finish(plan)
        return _finish(plan, await worker_pool().call_async(plan.job, plan.config.timeout_s))
    except Exception as e:
        return _broken(e, config, outcome)


def compute_reward_sync(row: dict, outcome: Outcome, config: Optional[RewardConfig] = None) -> RewardResult:
    """compute_reward, blocking the calling thread (not the event loop's: use compute_reward there)."""
    try:
        plan = _plan(row, outcome, config)
        if plan.job is None:
            return _finish(plan)
        return _finish(plan, worker_pool().call(plan.job, plan.config.timeout_s))
    except Exception as e:
        return _broken(e, config, outcome)


_pool: Optional[WorkerPool] = None
_pool_lock = threading.Lock()
SCORER = "insandbox.rl.rewards.scoring:score_in_worker"


def worker_count() -> int:
    """INSANDBOX_REWARD_WORKERS, or up to 4 (one per CPU)."""
    configured = os.environ.get("INSANDBOX_REWARD_WORKERS", "").strip()
    return max(1, int(configured)) if configured else min(4, os.cpu_count() or 1)


def worker_pool() -> WorkerPool:
    """The process's scoring workers (a new set after a fork: a child never shares its parent's)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():
            _pool = WorkerPool(SCORER, worker_count())
        return _pool


def start_reward_workers(count: Optional[int] = None) -> None:
    """Start the scoring workers now (about a second each, in parallel) rather than on first use."""
    worker_pool().start(count)


def stop_reward_workers() -> None:
    """Stop the scoring workers (at exit this happens by itself); later rewards start new ones."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None and pool.pid == os.getpid():
        pool.close()


atexit.register(stop_reward_workers)

__all__ = ["Outcome", "RewardConfig", "RewardResult", "broken_by_itself", "broken_sandbox_reward", "compute_reward",
           "compute_reward_sync", "start_reward_workers", "stop_reward_workers"]
