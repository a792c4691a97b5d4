"""The trajectory's cost: per step from its tokens, the run's total, unknown kept apart from zero (pure)."""
from __future__ import annotations

import json

import pytest

from insandbox.core.trajectory import SCHEMA_VERSION, StepRecord, Trajectory
from insandbox.models.pricing import Price

PRICE = Price(model="x", match="exact", entry="x", input=2.0, output=10.0, cache_read=0.5, cache_write=2.5)


def test_each_step_is_priced_from_its_tokens_and_the_total_is_their_sum(tmp_path):
    traj = Trajectory(run_id="r")
    traj.set_price(PRICE)
    assert traj.totals.cost_usd == 0.0  # priced, nothing spent yet
    traj.add_step(StepRecord(index=1, started_at=0, prompt_tokens=1_000, completion_tokens=100))
    traj.add_step(StepRecord(index=2, started_at=0, prompt_tokens=3_000, completion_tokens=200, cached_tokens=1_000,
                             cache_write_tokens=500))
    first, second = (s.cost_usd for s in traj.steps)
    assert first == pytest.approx((1_000 * 2.0 + 100 * 10.0) / 1e6)
    assert second == pytest.approx((1_500 * 2.0 + 1_000 * 0.5 + 500 * 2.5 + 200 * 10.0) / 1e6)
    assert traj.totals.cost_usd == pytest.approx(first + second)
    traj.save(tmp_path / "t.json")
    back = Trajectory.load(tmp_path / "t.json")
    assert back.schema_version == SCHEMA_VERSION == 3 and back.price == PRICE
    assert back.totals.cost_usd == traj.totals.cost_usd and back.steps[1].cache_write_tokens == 500


def test_an_unknown_price_leaves_every_cost_unknown_not_zero():
    traj = Trajectory(run_id="r")
    traj.set_price(Price(model="m", match="unknown"))
    traj.add_step(StepRecord(index=1, started_at=0, prompt_tokens=1_000, completion_tokens=100))
    assert traj.totals.cost_usd is None and traj.steps[0].cost_usd is None
    unpriced = Trajectory(run_id="rl")  # RL rollouts do not price their steps
    unpriced.add_step(StepRecord(index=1, started_at=0, prompt_tokens=1_000, completion_tokens=100))
    assert unpriced.price is None and unpriced.totals.cost_usd is None


def test_trajectories_of_version_2_load_without_a_cost(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schema_version": 2, "run_id": "x", "steps": [
        {"index": 1, "started_at": 0, "prompt_tokens": 5, "completion_tokens": 1}],
        "totals": {"steps": 1, "prompt_tokens": 5}}))
    old = Trajectory.load(path)
    assert old.price is None and old.totals.cost_usd is None and old.steps[0].cost_usd is None


@pytest.mark.parametrize("text", ["[]", '"a string"', "3"])
def test_a_json_file_that_is_not_an_object_is_refused_with_a_value_error(tmp_path, text):
    path = tmp_path / "trajectory.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="not a trajectory"):
        Trajectory.load(path)
