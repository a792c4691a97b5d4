"""Penalties: which exits and outcomes count, and how they add up."""
from __future__ import annotations

import pytest

from insandbox.core.episode import ExitReason
from insandbox.rl.rewards import Outcome, RewardConfig
from insandbox.rl.rewards.penalties import broken_sandbox_penalty, penalties

CONFIG = RewardConfig(no_answer_penalty=-1.0, max_steps_penalty=-0.5, truncation_penalty=-0.25)


@pytest.mark.parametrize("outcome, applied", [
    (Outcome("C", "submitted"), {}),
    (Outcome(None, "submitted"), {"no_answer": -1.0}),
    (Outcome(" \n", "submitted"), {"no_answer": -1.0}),  # an empty file is no answer
    (Outcome("C", "max_steps"), {"max_steps": -0.5}),
    (Outcome("C", ExitReason.STUCK), {"max_steps": -0.5}),  # a loop that would have run out of steps
    (Outcome("C", "submitted", truncated=True), {"truncation": -0.25}),
    (Outcome("C", "token_budget"), {"truncation": -0.25}),
    (Outcome("C", "context_length"), {"truncation": -0.25}),
    (Outcome("C", "time_limit"), {}),
    (Outcome("C", "time_limit", exit_cause="infrastructure"), {}),  # waiting on the model server: not the model's
    (Outcome("C", "time_limit", exit_cause="commands"), {"time_limit": -0.5}),  # its own commands: as max_steps
    (Outcome("C", "model_error"), {}),
    (Outcome("C", "interrupted"), {}),
    (Outcome(None, "max_steps", truncated=True), {"no_answer": -1.0, "max_steps": -0.5, "truncation": -0.25}),
])
def test_penalties_that_apply(outcome, applied):
    assert penalties(outcome, CONFIG) == applied


def test_unconfigured_penalties_are_recorded_at_zero():
    assert penalties(Outcome(None, "max_steps"), RewardConfig()) == {"no_answer": 0.0, "max_steps": 0.0}


def test_the_time_limit_penalty_is_its_own_when_set_and_counts_in_the_worst_ending():
    config = RewardConfig(max_steps_penalty=-0.5, time_limit_penalty=-2.0)
    assert penalties(Outcome("C", "time_limit", exit_cause="commands"), config) == {"time_limit": -2.0}
    assert broken_sandbox_penalty(config) == -2.0  # breaking the sandbox still pays no more than stalling
