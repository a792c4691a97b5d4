"""The training config as TRL's GRPOConfig: the paper's recipe maps to the right fields."""
from __future__ import annotations

from pathlib import Path

import pytest
from trl import GRPOConfig

from insandbox.rl.trainers.config import ConfigError, load_config
from insandbox.rl.trainers.grpo_args import MAPPED_FIELDS, batch_layout, grpo_kwargs, rewards_for_trl


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


def test_rloo_rewards_give_trl_the_leave_one_out_advantage():
    config = load_config(None, {"preset": "paper"})
    rewards = [1.0, 0.0, 0.0, 1.0, 0.5, 0.0, 0.0, 0.0]
    scaled = rewards_for_trl(rewards, config)
    mean = sum(scaled) / len(scaled)
    for i, r in enumerate(rewards):  # TRL's advantage (scaled reward - group mean) is RLOO's
        others = [x for j, x in enumerate(rewards) if j != i]
        assert scaled[i] - mean == pytest.approx(r - sum(others) / len(others))
    grpo = load_config(None, {"preset": "paper", "grpo": {"advantage": "grpo"}})
    assert rewards_for_trl(rewards, grpo) == rewards
