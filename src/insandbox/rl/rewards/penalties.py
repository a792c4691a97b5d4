"""Penalties: added to the correctness when an episode ended badly on the model's own account.

- no_answer: no answer file, or one holding only whitespace (an empty file is no answer: otherwise
  touching the file would be a way around the penalty);
- max_steps: the episode ran out of steps, or was stopped as stuck (the same calls with the same
  results again and again: a loop that would have run out of steps anyway);
- truncation: the response ran out of tokens (the rollout's `truncated`, or the episode ended on
  its token budget or the model's context length).
- time_limit: the episode ran out of time in the model's own commands (exit_cause "commands": its
  tool calls took at least half of the time, core/episode.py; `sleep 100000` every turn is
  stalling, not bad luck). `time_limit_penalty` unset: the max_steps penalty, as running out of
  steps and running out of time this way are the same failure to finish.
- broken sandbox: the sandbox died of what its own processes did (exit_cause "sandbox": the kernel
  killed the container for its memory limit, e.g. after the model raised the in-container
  server's OOM score and then hogged memory). That is the model's doing, and breaking the
  environment must never pay: the answer is not read and the reward is `broken_sandbox_penalty`,
  at most the sum of the negative penalties above (the lowest reward any other ending can get).
A time limit spent waiting on the model server or the sandbox's start (exit_cause "infrastructure")
is not penalised, nor are the infrastructure failures (model_error, internal_error, a sandbox_error of the engine) or
interruptions: those episodes say nothing about the model, `detail["exit_failure"]` marks them,
and the rollout runner leaves them out of the loss (RolloutRecord.masked).
Each penalty is added as configured (use negative numbers); they add up when several apply.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import Outcome, RewardConfig

STEP_LIMIT_EXITS = frozenset({"max_steps", "stuck"})
TIME_LIMIT_EXIT = "time_limit"
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
    if out_of_time_in_commands(outcome):
        applied["time_limit"] = time_limit_penalty(config)
    return applied


def out_of_time_in_commands(outcome: Outcome) -> bool:
    """The episode's time limit passed while (mostly) the model's own commands ran."""
    return str(outcome.exit_reason) == TIME_LIMIT_EXIT and outcome.exit_cause == "commands"


def time_limit_penalty(config: RewardConfig) -> float:
    """The configured time-limit penalty; unset: the max_steps penalty."""
    return config.max_steps_penalty if config.time_limit_penalty is None else config.time_limit_penalty


def worst_penalty(config: RewardConfig) -> float:
    """The sum of the negative penalties one ending can collect: the lowest reward an ending other than a
    broken sandbox can get (with a correctness of 0)."""
    # out of steps and out of time are two exit reasons: one episode has one of them at most
    out_of_time_or_steps = min(config.max_steps_penalty, time_limit_penalty(config), 0.0)
    return min(config.no_answer_penalty, 0.0) + out_of_time_or_steps + min(config.truncation_penalty, 0.0)


def broken_sandbox_penalty(config: RewardConfig) -> float:
    """The reward of a sandbox broken by what ran in it: the configured value, never above the worst penalty."""
    worst = worst_penalty(config)
    configured = config.broken_sandbox_penalty
    return worst if configured is None else min(configured, worst)
