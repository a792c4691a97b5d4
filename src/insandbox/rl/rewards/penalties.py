"""Penalties: added to the correctness when an episode ended badly on the model's own account.

- no_answer: no answer file, or one holding only whitespace (an empty file is no answer: otherwise
  touching the file would be a way around the penalty);
- max_steps: the episode ran out of steps, or was stopped as stuck (the same calls with the same
  results again and again: a loop that would have run out of steps anyway);
- truncation: the response ran out of tokens (the rollout's `truncated`, or the episode ended on
  its token budget or the model's context length).
time_limit is not penalised (slowness is as much the sandbox's as the model's), nor are the
infrastructure failures (model_error, sandbox_error, internal_error) or interruptions: those
episodes say nothing about the model, and `detail["exit_failure"]` lets the trainer drop them.
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
