"""The rollout hook's pure parts: groups from TRL's prompts, records as TRL's fields, the batch's
scalars and the console line (no Docker, no model)."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from insandbox.rl.rollout.summary import summarize
from insandbox.rl.rollout.types import RolloutRecord
from insandbox.rl.trainers.metrics import StepLog, console_line
from insandbox.rl.trainers.rollout_hook import RolloutBatch, SandboxRollouts, batch_metrics, task_groups


def record(task: str, sample: int, reward: float, response: list[int], mask: list[int], truncated=False,
           exit_reason="submitted") -> RolloutRecord:
    logprobs = [-0.5 if m else None for m in mask]
    return RolloutRecord(id=f"{task}/g0/s{sample}", task_id=task, sample=sample, prompt_ids=[1, 2, 3],
                         response_ids=response, response_mask=mask, response_logprobs=logprobs, reward=reward,
                         truncated=truncated, exit_reason=exit_reason, tool_calls=2, num_turns=2,
                         timings={"wall_s": 2.0, "env_s": 0.5, "generate_s": 1.0})


def test_trls_prompts_are_whole_groups_of_one_task():
    assert task_groups(["a", "a", "b", "b"], 2) == ["a", "b"]
    assert task_groups(["a", "a", "a", "a"], 2) == ["a", "a"]  # the same task twice in a batch: two groups
    with pytest.raises(ValueError, match="not whole groups"):
        task_groups(["a", "a", "b"], 2)
    with pytest.raises(ValueError, match="mixes tasks"):
        task_groups(["a", "b", "b", "a"], 2)


def hook(mask_truncated: bool) -> SandboxRollouts:
    return SandboxRollouts(rollouts=None, rows={}, out=None, concurrency=1, mask_truncated=mask_truncated)


def test_records_become_trls_fields_with_environment_tokens_masked():
    records = [record("a", 0, 1.0, [5, 6, 7, 8, 9], [1, 1, 0, 0, 1]),
               record("a", 1, -0.5, [5, 6], [1, 1], truncated=True),
               record("a", 2, 0.0, [], [])]
    out = hook(mask_truncated=False)._for_trl(records, pad_id=2)
    assert out["prompt_ids"] == [[1, 2, 3]] * 3
    assert out["completion_ids"] == [[5, 6, 7, 8, 9], [5, 6], [2]]  # an empty response: one pad, out of the loss
    assert out["env_mask"] == [[1, 1, 0, 0, 1], [1, 1], [0]]
    assert out["logprobs"][0] == [-0.5, -0.5, None, None, -0.5]
    assert out["rollout_reward"] == [1.0, -0.5, 0.0] and out["rollout_id"][1] == "a/g0/s1"
    masked = hook(mask_truncated=True)._for_trl(records, pad_id=2)
    assert masked["env_mask"][1] == [0, 0] and masked["env_mask"][0] == [1, 1, 0, 0, 1]


def batch(out: Path = Path("/o")) -> RolloutBatch:
    records = [record("a", 0, 1.0, [5, 6, 7], [1, 0, 1]), record("a", 1, 0.0, [5], [1], exit_reason="max_steps")]
    return RolloutBatch(step=3, summary=summarize(records, wall_s=30.0), check_mismatches=0, rollout_s=30.0,
                        model_tokens=3, env_tokens=1, masked_truncated=0,
                        records_file=str(out / "rollouts/step-00003.jsonl"))


def test_batch_scalars_count_exit_reasons_one_by_one():
    scalars = batch_metrics(batch())
    assert scalars["rollout/reward_mean"] == 0.5 and scalars["rollout/groups_with_spread"] == 1
    assert scalars["rollout/exit/submitted"] == 1 and scalars["rollout/exit/max_steps"] == 1
    assert scalars["rollout/rollouts_per_min"] == 4.0 and scalars["rollout/sandbox_share"] == 0.25
    assert scalars["rollout/tool_calls_per_rollout"] == 2 and scalars["rollout/trained_tokens"] == 3
    assert all(isinstance(v, float) for v in scalars.values())


def test_a_step_is_one_json_row_and_one_console_line(tmp_path):
    lines = []
    rollouts = SimpleNamespace(batches=[batch(tmp_path)])
    log = StepLog(tmp_path, rollouts, echo=lines.append)
    log.step_s = 40.0
    state = SimpleNamespace(global_step=3, max_steps=5, is_world_process_zero=True)
    log.on_log(None, state, None, logs={"loss": 0.01, "grad_norm": 0.5, "learning_rate": 1e-5, "reward": 0.57,
                                        "rollout/reward_mean": 0.5, "completions/mean_length": 2.0})
    log.on_log(None, state, None, logs={"train_runtime": 80.0, "train_loss": 0.02})
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and log.final == {"train_runtime": 80.0, "train_loss": 0.02}
    row = rows[0]
    assert row["step"] == 3 and row["loss"] == 0.01 and row["reward_mean"] == 0.5 and row["reward_std"] > 0
    assert row["exit_reasons"] == {"submitted": 1, "max_steps": 1} and row["records"] == "rollouts/step-00003.jsonl"
    assert row["time"] == {"step_s": 40.0, "rollout_s": 30.0, "train_s": 10.0}
    assert row["trl"] == {"reward": 0.57, "completions/mean_length": 2.0}
    assert len(lines) == 1 and lines[0] == console_line(row)
    assert "step 3/5" in lines[0] and "reward 0.500" in lines[0] and "max_steps 1 submitted 1" in lines[0]
    assert "spread 1/1 groups" in lines[0] and "check ok" in lines[0]


def test_masked_rollouts_reach_trl_with_no_loss_and_no_reward(tmp_path):
    """Issue 22: an infrastructure failure or a time limit was trained on with the error value as its
    reward. Now its tokens are out of the loss and TRL gets None (no advantage, out of the group mean)."""
    from insandbox.rl.trainers.reward_func import make_reward_func

    failed = record("a", 0, 0.0, [5, 6, 7], [1, 0, 1], exit_reason="sandbox_error")
    failed.masked, failed.exit_cause = True, "infrastructure"
    slow = record("a", 1, 0.0, [5, 6], [1, 1], exit_reason="time_limit")
    slow.masked = True
    broken = record("a", 2, -1.0, [5, 6], [1, 1], exit_reason="sandbox_error")
    broken.exit_cause = "sandbox"  # the model's doing: trained on, penalised
    fine = record("a", 3, 1.0, [5, 6], [1, 1])
    records = [failed, slow, broken, fine]
    h = hook(mask_truncated=False)
    out = h._for_trl(records, pad_id=2)
    assert out["env_mask"] == [[0, 0, 0], [0, 0], [1, 1], [1, 1]]
    assert out["rollout_scored"] == [False, False, True, True]
    h.unlogged = None
    rewards = make_reward_func(h)(prompts=[], completions=[], completion_ids=out["completion_ids"],
                                  rollout_reward=out["rollout_reward"], rollout_scored=out["rollout_scored"])
    assert rewards == [None, None, -1.0, 1.0]  # the records' own rewards, unscaled

    summary = summarize(records, wall_s=10.0)
    assert summary["masked"] == {"sandbox_error": 1, "time_limit": 1} and summary["broken_sandbox"] == 1
    assert summary["reward_mean"] == 0.0 and summary["groups_with_spread"] == 1  # -1 and 1: the masked left out
    b = RolloutBatch(step=1, summary=summary, check_mismatches=0, rollout_s=10.0, model_tokens=4, env_tokens=1,
                     masked_truncated=0, records_file=str(tmp_path / "rollouts/step-00001.jsonl"),
                     masked=summary["masked"], broken_sandbox=1)
    scalars = batch_metrics(b)
    assert scalars["rollout/masked"] == 2 and scalars["rollout/masked/time_limit"] == 1
    assert scalars["rollout/masked/sandbox_error"] == 1 and scalars["rollout/broken_sandbox"] == 1
    lines = []
    log = StepLog(tmp_path, SimpleNamespace(batches=[b]), echo=lines.append)
    log.on_log(None, SimpleNamespace(global_step=1, max_steps=1, is_world_process_zero=True), None,
               logs={"loss": 0.0, "reward": 0.0})
    row = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert row["masked"] == {"sandbox_error": 1, "time_limit": 1} and row["broken_sandbox"] == 1
    assert "masked sandbox_error 1 time_limit 1" in lines[0] and "broken sandboxes 1" in lines[0]
