"""The training config as TRL's GRPOConfig: the paper's recipe maps to the right fields."""
from __future__ import annotations

from pathlib import Path

import pytest
from trl import GRPOConfig

from insandbox.rl.trainers.config import ConfigError, load_config
from insandbox.rl.trainers.grpo_args import MAPPED_FIELDS, batch_layout, grpo_kwargs, rloo_factors


def paper_args(**overrides) -> GRPOConfig:
    config = load_config(None, {"preset": "paper", **overrides})
    return GRPOConfig(**grpo_kwargs(config, Path("/tmp/insandbox-args"), use_cpu=True))


def test_the_paper_preset_maps_onto_grpo_config():
    args = paper_args()
    assert args.num_generations == 8
    # 8 prompts x 8 rollouts = 64 per batch: one optimizer update per batch, micro-batches of 1
    assert args.per_device_train_batch_size == 1
    assert args.steps_per_generation == 64 and args.gradient_accumulation_steps == 64
    assert args.generation_batch_size == 64
    assert args.beta == 0.0  # no KL, no reference model
    assert args.epsilon == 0.2 and args.epsilon_high == 0.28  # clip-higher
    assert args.learning_rate == 1e-6 and str(args.lr_scheduler_type.value) == "constant"
    assert args.scale_rewards == "none"  # no std division
    assert args.loss_type == "dapo"  # token-mean over the batch
    assert args.max_steps == 100 and args.num_iterations == 1
    assert args.max_completion_length == 65536
    assert args.temperature == 1.0 and args.top_p == 1.0
    assert args.mask_truncated_completions is False and args.use_vllm is False
    assert args.bf16 is True and args.gradient_checkpointing is True
    assert args.save_steps == 20 and args.logging_steps == 1
    assert args.max_grad_norm == 1.0 and args.weight_decay == 0.01


def test_mini_batches_make_several_updates_per_rollout_batch():
    args = paper_args(grpo={"mini_batches": 4, "micro_batch": 2})
    assert args.steps_per_generation == 32 and args.gradient_accumulation_steps == 8


def test_a_batch_must_split_into_whole_groups_per_process():
    config = load_config(None, {"preset": "smoke", "grpo": {"prompts_per_step": 2, "num_generations": 4}})
    assert batch_layout(config, 2)["per_process"] == 4
    with pytest.raises(ConfigError, match="does not split"):
        batch_layout(config, 3)
    config = load_config(None, {"preset": "smoke", "grpo": {"prompts_per_step": 2, "num_generations": 4,
                                                            "micro_batch": 1}})
    with pytest.raises(ConfigError, match="not whole groups"):
        batch_layout(config, 8)


def test_mapped_fields_are_grpo_config_fields():
    import dataclasses

    assert MAPPED_FIELDS <= {f.name for f in dataclasses.fields(GRPOConfig)}
    config = load_config(None, {"preset": "smoke"})
    assert set(grpo_kwargs(config, Path("/x"))) <= MAPPED_FIELDS


def test_rloo_factors_turn_trls_advantage_into_the_leave_one_out_one():
    """TRL's advantage is the reward minus the mean of its group's scored rollouts (a masked one has
    reward None: advantage 0, out of the mean); times the factor it is RLOO's over the scored ones.
    (Before issue 22 the rewards themselves were scaled, so TRL logged G/(G-1) times the true reward.)"""
    rewards = [1.0, 0.0, None, 1.0, 0.5, 0.0, None, 0.0,  # two masked rollouts in the first group
               0.3, None, None, None, None, None, None, None]  # one scored rollout left: no baseline
    n = 8
    scored = [r is not None for r in rewards]
    factors = rloo_factors(scored, n)
    for start in range(0, len(rewards), n):
        group = [r for r in rewards[start:start + n] if r is not None]
        mean = sum(group) / len(group)
        for i in range(start, start + n):
            r = rewards[i]
            trl_advantage = 0.0 if r is None else r - mean
            others = [x for j, x in enumerate(rewards[start:start + n]) if x is not None and start + j != i]
            rloo = 0.0 if r is None or not others else r - sum(others) / len(others)
            assert trl_advantage * factors[i] == pytest.approx(rloo)
    assert factors[:n] == [6 / 5] * n and factors[n:] == [1.0] * n
    assert rloo_factors([True] * 8, 8) == [8 / 7] * 8  # no masking: G/(G-1)
    assert rloo_factors(scored, n, advantage="grpo") == [1.0] * 16
    with pytest.raises(ValueError, match="whole groups"):
        rloo_factors([True] * 7, 8)
