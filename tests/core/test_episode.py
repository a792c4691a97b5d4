"""The one place that decides an episode is over and why (pure: no Docker, no model)."""
from __future__ import annotations

import asyncio
import json

import pytest

from insandbox.core.episode import Episode, ExitReason, Limits
from insandbox.core.trajectory import Trajectory
from insandbox.models.base import ContextLengthError, ModelError
from insandbox.sandbox import SandboxError


def test_exit_reasons_are_one_enum_with_the_json_values_of_before():
    assert [r.value for r in ExitReason] == [
        "submitted", "completed", "max_steps", "token_budget", "time_limit", "context_length", "stuck", "interrupted",
        "model_error", "sandbox_error", "internal_error"]
    assert {r for r in ExitReason if r.is_failure} == {ExitReason.MODEL_ERROR, ExitReason.SANDBOX_ERROR,
                                                      ExitReason.INTERNAL_ERROR}
    assert ExitReason.SUBMITTED == "submitted" and f"{ExitReason.STUCK}" == "stuck"
    assert json.dumps({"r": ExitReason.TIME_LIMIT}) == '{"r": "time_limit"}'
    # trajectories of schema 1 (plain strings) still load, as the enum
    t = Trajectory.model_validate({"schema_version": 1, "run_id": "x", "exit_reason": "max_steps"})
    assert t.exit_reason is ExitReason.MAX_STEPS


def test_steps_and_tokens_end_the_episode_and_the_first_end_wins():
    ep = Episode(Limits(max_steps=3, token_budget=100, stuck_after=None))
    ep.after_step(tokens=40)
    ep.after_step(tokens=40)
    assert not ep.done and ep.steps_left == 1
    ep.after_step(tokens=40)  # both limits at once: the step limit is checked first
    assert ep.exit_reason is ExitReason.MAX_STEPS and "3 steps" in ep.exit_detail
    ep.end(ExitReason.SANDBOX_ERROR, "later trouble")  # e.g. clean-up failing afterwards
    assert ep.exit_reason is ExitReason.MAX_STEPS

    ep = Episode(Limits(max_steps=10, token_budget=100))
    ep.after_step(tokens=60)
    ep.after_step(tokens=60, submitted=True)  # submitting beats the budget it also crossed
    assert ep.exit_reason is ExitReason.SUBMITTED and ep.submitted
    ep = Episode(Limits(max_steps=10, token_budget=100))
    ep.after_step(tokens=150)
    assert ep.exit_reason is ExitReason.TOKEN_BUDGET and "150" in ep.exit_detail


def test_the_same_calls_with_the_same_results_end_as_stuck():
    ep = Episode(Limits(max_steps=100, stuck_after=3))
    same = (("execute_bash", '{"command": "ls"}', "a.txt\n"),)
    ep.after_step(signature=same)
    ep.after_step(signature=same)
    ep.after_step(signature=(("execute_bash", '{"command": "ls"}', "a.txt\nb.txt\n"),))  # new result: progress
    ep.after_step(signature=same)
    ep.after_step(signature=None)  # a turn without calls repeats no call
    ep.after_step(signature=same)
    ep.after_step(signature=same)
    assert not ep.done
    ep.after_step(signature=same)
    assert ep.exit_reason is ExitReason.STUCK and "3 times" in ep.exit_detail
    off = Episode(Limits(max_steps=100, stuck_after=None))
    for _ in range(20):
        off.after_step(signature=same)
    assert not off.done


def test_time_limit_and_failures_map_to_their_reasons():
    ep = Episode(Limits(time_limit=0.001))
    assert ep.time_left() is not None
    import time
    time.sleep(0.01)
    assert ep.time_left() == 0.0
    ep.after_step()
    assert ep.exit_reason is ExitReason.TIME_LIMIT
    assert Episode().time_left() is None
    cases = [(ContextLengthError("too long"), ExitReason.CONTEXT_LENGTH), (ModelError("503"), ExitReason.MODEL_ERROR),
             (SandboxError("engine gone"), ExitReason.SANDBOX_ERROR),
             (asyncio.CancelledError(), ExitReason.INTERRUPTED), (KeyError("oops"), ExitReason.INTERNAL_ERROR)]
    for error, reason in cases:
        ep = Episode()
        assert ep.end_on_error(error) is reason and ep.exit_reason is reason
    ep = Episode()
    try:
        {}["missing"]
    except KeyError as e:
        ep.end_on_error(e)
    assert "test_episode.py" in ep.exit_detail and "please report" in ep.exit_detail


@pytest.mark.parametrize("reason,failure", [("submitted", False), ("stuck", False), ("model_error", True)])
def test_exit_reason_decides_failure(reason, failure):
    assert ExitReason(reason).is_failure is failure
