"""The verl advantage estimator of the recipe (insandbox_rloo): verl's RLOO, with masked rollouts
(response_mask all 0) left out of their group's baseline; and how verl's trainer process finds it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from insandbox.rl.trainers.verl_advantage import NAME, masked_rloo_advantage

ROOT = Path(__file__).resolve().parents[3]


def batch(scores: list[float], kept: list[bool], length: int = 4):
    rewards = torch.zeros(len(scores), length)
    rewards[:, -1] = torch.tensor(scores)
    mask = torch.ones(len(scores), length, dtype=torch.int64)
    mask[~torch.tensor(kept)] = 0
    return rewards, mask


def test_without_masked_rollouts_it_is_verls_rloo():
    rewards, mask = batch([1.0, 0.0, 0.5, 0.25, 1.0, 1.0], [True] * 6)
    index = np.array(["a", "a", "a", "b", "b", "b"], dtype=object)
    ours, _ = masked_rloo_advantage(rewards, mask, index)
    verls, _ = get_adv_estimator_fn("rloo")(token_level_rewards=rewards, response_mask=mask, index=index)
    assert torch.allclose(ours, verls)


def test_masked_rollouts_get_nothing_and_leave_the_baseline():
    scores = [1.0, 0.0, 0.0, 0.5, 0.25, 0.0, 0.0, 1.0]
    kept = [True, True, False, True, True, False, False, False]  # group b keeps one rollout
    rewards, mask = batch(scores, kept)
    index = np.array(["a"] * 4 + ["b"] * 4, dtype=object)
    advantages, returns = masked_rloo_advantage(rewards, mask, index)
    per_rollout = advantages[:, 0].tolist()
    # group a: kept 1.0, 0.0, 0.5 -> each minus the mean of the other two kept
    assert per_rollout[:4] == pytest.approx([1.0 - 0.25, 0.0 - 0.75, 0.0, 0.5 - 0.5])
    assert per_rollout[4:] == [0.0] * 4  # one kept rollout has no baseline; masked ones get nothing
    assert torch.equal(advantages, returns) and float(advantages[~mask.bool()].abs().sum()) == 0.0
    # verl's own rloo lets the masked rollouts' rewards into the baseline
    verls, _ = get_adv_estimator_fn("rloo")(token_level_rewards=rewards, response_mask=mask, index=index)
    assert verls[0, 0] != advantages[0, 0]


def test_verl_finds_it_in_a_fresh_process_through_run_sh_s_environment():
    """run.sh exports VERL_USE_EXTERNAL_MODULES before `ray start` and the trainer: `import verl` then
    registers the estimator in every process, the trainer's included."""
    exports = [line for line in (ROOT / "recipes/verl/run.sh").read_text().splitlines()
               if line.startswith("export VERL_USE_EXTERNAL_MODULES=")]
    assert exports and "insandbox.rl.trainers.verl_advantage" in exports[0]
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "insandbox.rl.trainers.verl_advantage",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    code = ("import verl\nfrom verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
            f"print(get_adv_estimator_fn({NAME!r}).__name__)")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "masked_rloo_advantage", done.stderr[-2000:]
