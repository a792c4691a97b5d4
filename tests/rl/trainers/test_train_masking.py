"""Issue 22 on the TRL path, with a real GRPO step: a rollout whose sandbox engine fails after a turn
and one cut by the rollout's time limit are masked (their sampled tokens out of the loss TRL
computes, advantage 0, no place in their group's baseline), the other rollouts get RLOO's advantage
over the scored ones only, and every reward TRL logs (metrics.jsonl's `trl`, TensorBoard's
train/reward) is the rollouts' true one, not scaled by G/(G-1).

The faults are injected at the environment (tests/rl/trainers/faults.py) after the policy sampled a
turn; the sandboxes, the policy (SmolLM2-135M from the embedded GGUF), the records and TRL's step are
all real."""
from __future__ import annotations

import itertools
import json

import pytest
from trl import GRPOTrainer

from insandbox.rl.rewards import RewardResult
from insandbox.rl.trainers.config import load_config
from insandbox.rl.trainers.rollout_hook import records_of
from insandbox.rl.trainers.trl_train import train
from tests.rl.trainers.faults import inject

N = 4  # rollouts in the step's one group: 0's engine fails, 1 runs out of time, 2 and 3 are scored


@pytest.fixture(scope="module")
def run(tmp_path_factory, docker_image):
    seen = []
    original_loss = GRPOTrainer._compute_loss

    def recording(self, model, inputs):
        seen.append({k: inputs[k].clone() for k in ("completion_ids", "completion_mask", "tool_mask", "advantages")})
        return original_loss(self, model, inputs)

    values = itertools.count(1)

    async def distinct_rewards(row, outcome, config):  # a spread in the group, so RLOO has work to do
        v = next(values) / 4
        return RewardResult(value=v, correct=v, detail={})

    out = tmp_path_factory.mktemp("masking")
    config = load_config(None, {"preset": "smoke", "out": str(out),
                                "grpo": {"num_generations": N, "max_steps": 1, "micro_batch": 2},
                                "rollout": {"max_turns": 2, "max_tokens_per_turn": 16, "max_response_tokens": 400}})
    config.rollout.image = docker_image
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(GRPOTrainer, "_compute_loss", recording)
        # after its first turn, rollout 0's sandbox engine fails and rollout 1 never gets its step back
        inject(patch, lambda row, sample: {0: "engine", 1: "slow"}.get(sample))
        train(config, reward_fn=distinct_rewards, echo=lambda line: None)
    records = records_of(out / "rollouts" / "step-00001.jsonl")
    return {"out": out, "seen": seen, "records": records}


def test_failed_and_timed_out_rollouts_are_masked_in_the_records(run):
    by_sample = {r.sample: r for r in run["records"]}
    assert sorted(by_sample) == list(range(N))
    assert by_sample[0].exit_reason == "sandbox_error" and by_sample[0].exit_cause == "infrastructure"
    assert by_sample[0].masked and by_sample[1].masked and by_sample[1].exit_reason == "time_limit"
    assert sum(by_sample[0].response_mask) > 0  # it sampled a turn: tokens that were once trained on
    assert not by_sample[2].masked and not by_sample[3].masked


def test_trl_trains_on_the_scored_rollouts_only_with_rloo_advantages(run):
    records = run["records"]
    scored = [r for r in records if not r.masked]
    rows = [(ids, cm, tm, adv) for batch in run["seen"] for ids, cm, tm, adv in zip(
        batch["completion_ids"], batch["completion_mask"], batch["tool_mask"], batch["advantages"])]
    assert len(rows) == N
    matched = 0
    for ids, completion_mask, tool_mask, advantage in rows:
        length = int(completion_mask.sum())
        record = next((r for r in records if r.response_ids == ids[:length].tolist()), None)
        loss_mask = (completion_mask * tool_mask).tolist()
        if record is None or record.masked:  # a masked rollout (an empty one is one pad token)
            assert sum(loss_mask) == 0 and float(advantage) == 0.0
            continue
        matched += 1
        assert loss_mask[:length] == record.response_mask and sum(loss_mask[length:]) == 0
        others = [r.reward for r in scored if r.id != record.id]
        assert float(advantage) == pytest.approx(record.reward - sum(others) / len(others))  # RLOO, scored only
    assert matched == len(scored) == 2


def test_the_logged_rewards_are_the_true_ones(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rows = [json.loads(line) for line in (run["out"] / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1
    row = rows[0]
    scored = [r.reward for r in run["records"] if not r.masked]
    true_mean = sum(scored) / len(scored)
    assert row["reward_mean"] == pytest.approx(true_mean)
    assert row["trl"]["reward"] == pytest.approx(true_mean)  # was G/(G-1) times it
    assert row["trl"]["rewards/insandbox_reward/mean"] == pytest.approx(true_mean)
    assert row["trl"]["reward_std"] == pytest.approx(row["reward_std"])
    assert row["masked"] == {"sandbox_error": 1, "time_limit": 1}
    events = EventAccumulator(str(run["out"] / "tensorboard"))
    events.Reload()
    assert [e.value for e in events.Scalars("train/reward")] == pytest.approx([true_mean])
    assert [e.value for e in events.Scalars("train/rollout/masked")] == [2.0]
    assert [e.value for e in events.Scalars("train/rollout/masked/time_limit")] == [1.0]
