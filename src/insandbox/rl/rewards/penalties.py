"""Penalties: added to the correctness when an episode ended badly on the model's own account.

- no_answer: no answer file, or one holding only whitespace (an empty file is no answer: otherwise
  touching the file would be a way around the penalty);
- max_steps: the episode ran out of steps, or was stopped as stuck (the same calls with the same
  results again and again: a loop that would have run out of steps anyway);
- truncation: the response ran out of tokens (the rollout's `truncated`, or the episode ended on
  its token budget or the model's context length).
- broken sandbox: the sandbox died of what its own processes did (exit_cause "sandbox": the kernel
  killed the container for its memory limit, e.g. after the model raised the in-container
  server's OOM score and then hogged memory). That is the model's doing, and breaking the
  environment must never pay: the answer is not read and the reward is `broken_sandbox_penalty`,
  at most the sum of the negative penalties above (the lowest reward any other ending can get).
time_limit is not penalised (slowness is as much the sandbox's as the model's), nor are the
infrastructure failures (model_error, internal_error, a sandbox_error of the engine) or
interruptions: those episodes say nothing about the model, `detail["exit_failure"]` marks them,
and the rollout runner leaves them out of the loss (RolloutRecord.masked).
Each penalty is added as configured (use negative numbers); they add up when several apply.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import Outcome, RewardConfig

STEP_LIMIT_EXITS = frozenset({"max_steps", "stuck"})
TOKEN_LIMIT_EXITS = frozenset({"token_budget", "context_length"})
FAILURE_EXITS = frozenset({"model_error", "sandbox_error", "internal_error"})


def no_answer(outcome: Outcome) -> bool:
    return outcome.answer is None or not outcome.answer.strip()


def penalties(outcome: Outcome, config: RewardConfig) -> dict[str, float]:
    """{penalty: amount} for every condition that holds (amount 0.0 when not configured)."""
    applied = {}
    if no_answer(outcome):
        applied["no_answer"] = config.no_answer_penalty
    if str(outcome.exit_reason) in STEP_LIMIT_EXITS:
        applied["max_steps"] = config.max_steps_penalty
    if outcome.truncated or str(outcome.exit_reason) in TOKEN_LIMIT_EXITS:
        applied["truncation"] = config.truncation_penalty
    return applied


def worst_penalty(config: RewardConfig) -> float:
    """The sum of the negative penalties: the lowest reward an ending other than a broken sandbox can get
    (with a correctness of 0)."""
    return sum(min(p, 0.0) for p in (config.no_answer_penalty, config.max_steps_penalty, config.truncation_penalty))


def broken_sandbox_penalty(config: RewardConfig) -> float:
    """The reward of a sandbox broken by what ran in it: the configured value, never above the worst penalty."""
    worst = worst_penalty(config)
    configured = config.broken_sandbox_penalty
    return worst if configured is None else min(configured, worst)
