"""The importance-sampling correction of off-policy tokens, with numbers checked by hand."""
from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from insandbox.rl.rollout.types import RolloutRecord
from insandbox.rl.trainers.rollout_hook import token_versions
from insandbox.rl.trainers.trl_trainer import InSandboxGRPOTrainer, importance_weights, off_policy_mask

NAN = float("nan")


def test_truncated_importance_weights_by_hand():
    current = torch.tensor([[-1.0, -2.0, -0.5, -0.1, -3.0]])
    sampler = torch.tensor([[-1.5, -1.0, NAN, -1.2, -3.0]])
    off = torch.tensor([[True, True, True, True, False]])  # the last: on-policy (or the environment's)
    weights, stats = importance_weights(current, sampler, off, cap=2.0)
    # exp(-1.0 + 1.5) = 1.6487; exp(-2.0 + 1.0) = 0.3679; unknown sampler logprob: 1; exp(1.1) = 3.004 -> cut at 2
    assert weights.tolist()[0] == pytest.approx([math.exp(0.5), math.exp(-1.0), 1.0, 2.0, 1.0], rel=1e-6)
    assert stats["tokens"] == 3.0
    assert stats["ratio_mean"] == pytest.approx((math.exp(0.5) + math.exp(-1.0) + math.exp(1.1)) / 3, rel=1e-6)
    assert stats["ratio_max"] == pytest.approx(math.exp(1.1), rel=1e-6)
    assert stats["capped"] == pytest.approx(1 / 3)


def test_off_policy_tokens_are_those_of_older_versions_never_the_environments():
    versions = [[3, 3, None, None, 4], [4, None, 4]]
    mask = off_policy_mask(versions, current=4, shape=torch.Size([2, 6]))
    assert mask.tolist() == [[True, True, False, False, False, False], [False, False, False, False, False, False]]


def test_turn_versions_spread_over_their_tokens():
    record = RolloutRecord(id="a/g0/s0", task_id="a", prompt_ids=[1], response_ids=[5, 6, 7, 8, 9, 10],
                           response_mask=[1, 1, 0, 0, 1, 1], policy_versions=[2, 3], policy_version=2)
    assert token_versions(record) == [2, 2, None, None, 3, 3]
    record.policy_versions = [2, 3, 3]  # a turn that sampled nothing: every model token gets the oldest version
    assert token_versions(record) == [2, 2, None, None, 2, 2]


def test_the_correction_multiplies_each_tokens_advantage_and_leaves_on_policy_batches_alone():
    trainer = SimpleNamespace(insandbox_hook=SimpleNamespace(last_token_versions=[[1, 1, None, 2], [2, 2, None, 2]]),
                              state=SimpleNamespace(global_step=2), insandbox_importance_cap=2.0,
                              _metrics={"train": defaultdict(list)})
    output = {"completion_mask": torch.ones(2, 4, dtype=torch.long),
              "tool_mask": torch.tensor([[1, 1, 0, 1], [1, 1, 0, 1]]),
              "advantages": torch.tensor([0.5, -1.0]),
              "sampling_per_token_logps": torch.tensor([[-1.0, -2.0, NAN, -0.3], [-1.0, -1.0, NAN, -1.0]]),
              "old_per_token_logps": torch.tensor([[-0.5, -2.5, -9.0, -0.3], [-0.7, -1.0, -1.0, -1.0]])}
    InSandboxGRPOTrainer._correct_off_policy(trainer, output)
    # row 0: tokens 0 and 1 sampled by version 1 < 2: 0.5 * exp(0.5), 0.5 * exp(-0.5); the rest on-policy or env
    assert output["advantages"].tolist()[0] == pytest.approx([0.5 * math.exp(0.5), 0.5 * math.exp(-0.5), 0.5, 0.5])
    assert output["advantages"].tolist()[1] == [-1.0] * 4  # all on-policy: untouched
    assert trainer._metrics["train"]["off_policy/tokens"] == [2.0]

    on_policy = {**output, "advantages": torch.tensor([0.5, -1.0])}
    trainer.insandbox_hook.last_token_versions = [[2, 2, None, 2], [2, 2, None, 2]]
    InSandboxGRPOTrainer._correct_off_policy(trainer, on_policy)
    assert on_policy["advantages"].tolist() == [0.5, -1.0]  # k = 0: nothing changes, not even the shape
