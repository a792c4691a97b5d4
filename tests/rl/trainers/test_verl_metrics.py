"""verl's logged score (critic/score, critic/rewards: its own compute_data_metrics) leaves the masked
rollouts out, in the trainer's process as run.sh starts it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from verl import DataProto

import insandbox.rl.trainers.verl_advantage  # noqa: F401  (what VERL_USE_EXTERNAL_MODULES imports)

ROOT = Path(__file__).resolve().parents[3]


def step_batch(scores: list[float], masked: list[bool], with_column: bool, length: int = 6) -> DataProto:
    """A step's batch as verl's agent loop makes it: the outcome on the last response token, a masked
    rollout's response_mask all 0 (verl_agent_loop.py), its reward the error value."""
    n, prompt = len(scores), 4
    responses = torch.randint(10, 100, (n, length))
    attention = torch.ones(n, prompt + length, dtype=torch.int64)
    attention[:, -1] = 0  # one pad token each
    response_mask = attention[:, prompt:].clone()
    response_mask[torch.tensor(masked)] = 0
    rewards = torch.zeros(n, length)
    rewards[:, length - 2] = torch.tensor(scores)
    advantages = torch.randn(n, length) * response_mask
    batch = DataProto.from_dict({
        "prompts": torch.randint(10, 100, (n, prompt)), "responses": responses, "attention_mask": attention,
        "response_mask": response_mask, "token_level_scores": rewards, "token_level_rewards": rewards.clone(),
        "advantages": advantages, "returns": advantages.clone()})
    if with_column:  # the legacy trainer keeps reward_extra_info in the batch; V1's metrics batch does not
        batch.non_tensor_batch["masked"] = np.array([float(m) for m in masked])
    return batch


@pytest.mark.parametrize("with_column", [True, False])
def test_the_logged_score_is_the_mean_over_rollouts_that_are_not_masked(with_column):
    """Regression: critic/score/mean counted the masked rollouts' error value (-0.094 logged, -0.150 true):
    6 of 16 rollouts masked (the sampler failed; reward 0.0), the 10 others averaging -0.150."""
    from verl.trainer.ppo.metric_utils import compute_data_metrics

    kept_scores = [-0.5, 0.0, 0.25, -0.25, -0.5, 0.0, 0.0, -0.25, -0.25, 0.0]
    scores = kept_scores[:5] + [0.0] * 6 + kept_scores[5:]
    masked = [False] * 5 + [True] * 6 + [False] * 5
    metrics = compute_data_metrics(batch=step_batch(scores, masked, with_column), use_critic=False)
    assert sum(scores) / len(scores) == pytest.approx(-0.09375)  # what verl logged
    assert metrics["critic/score/mean"] == pytest.approx(-0.150) and metrics["critic/rewards/mean"] == pytest.approx(
        -0.150)
    assert metrics["critic/score/max"] == 0.25 and metrics["critic/score/min"] == -0.5
    assert metrics["insandbox/masked_rollouts"] == 6
    # no masked rollout: verl's own numbers, untouched
    plain = step_batch(kept_scores, [False] * 10, with_column)
    assert compute_data_metrics(batch=plain, use_critic=False) == compute_data_metrics.__wrapped__(
        batch=plain, use_critic=False)


def test_verls_trainer_logs_it_in_a_fresh_process_through_run_sh_s_environment():
    """run.sh exports VERL_USE_EXTERNAL_MODULES: `import verl` loads the estimator and this wrapper before the
    trainer imports compute_data_metrics by name; a trainer module loaded first is rebound too. (verl's V1
    trainer imports it the same way; it needs transfer_queue, not installed here.)"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    show = "print(ray_trainer.compute_data_metrics.__module__)"
    for external, code in [
        ("insandbox.rl.trainers.verl_advantage", f"import verl\nfrom verl.trainer.ppo import ray_trainer\n{show}"),
        ("", f"from verl.trainer.ppo import ray_trainer\nimport insandbox.rl.trainers.verl_advantage\n{show}")]:
        done = subprocess.run([sys.executable, "-c", code], env={**env, "VERL_USE_EXTERNAL_MODULES": external},
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split()[-1] == "insandbox.rl.trainers.verl_metrics"
