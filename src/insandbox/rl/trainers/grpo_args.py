"""The training config as TRL's GRPOConfig: what maps onto which field, in one place.

    grpo.num_generations      -> num_generations (a group of rollouts per prompt)
    grpo.prompts_per_step     -> with num_generations, the rollout batch: per_device_train_batch_size
    grpo.micro_batch             (micro_batch) x steps_per_generation x processes = prompts x generations
    grpo.mini_batches         -> gradient_accumulation_steps = steps_per_generation / mini_batches
    grpo.beta, epsilon, epsilon_high, scale_rewards, loss_type, num_iterations -> the same names
    grpo.advantage            -> rloo: TRL's advantages are scaled by k/(k-1) per group (see rloo_factors)
    grpo.learning_rate, lr_scheduler, warmup_steps, weight_decay, max_grad_norm, seed -> TrainingArguments
    grpo.precision            -> bf16 / fp16 autocast (fp32 weights and optimizer state)
    grpo.mask_truncated       -> our env_mask (by the record's truncated flag); TRL's own check is off
    rollout.max_response_tokens -> max_completion_length (only used by dr_grpo's normaliser and logs)
    rollout.temperature, top_p -> temperature, top_p (TRL scores tokens at the sampling temperature)

Generation is ours (rollout_func), so TRL's sampling and vLLM settings do not apply.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .config import MAPPED_FIELDS, ConfigError, TrainConfig  # noqa: F401 (MAPPED_FIELDS: declared beside the check)


def batch_layout(config: TrainConfig, num_processes: int = 1) -> dict[str, int]:
    """How one rollout batch splits: over processes, into micro-batches and optimizer updates."""
    g = config.grpo
    batch = g.prompts_per_step * g.num_generations
    if batch % (num_processes * g.micro_batch * g.mini_batches):
        raise ConfigError(f"a rollout batch of {batch} ({g.prompts_per_step} prompts x {g.num_generations}) does not "
                          f"split over {num_processes} processes x {g.mini_batches} mini_batches x micro_batch "
                          f"{g.micro_batch}")
    per_process = batch // num_processes
    if per_process % g.num_generations:
        # TRL hands each process its slice of the batch; a group split over processes could not share a sandbox
        # batch here (rewards are still grouped globally by TRL, but our records would name half-groups)
        raise ConfigError(f"each process gets {per_process} rollouts: not whole groups of {g.num_generations}")
    steps_per_generation = per_process // g.micro_batch
    return {"rollouts_per_batch": batch, "per_process": per_process, "steps_per_generation": steps_per_generation,
            "gradient_accumulation_steps": steps_per_generation // g.mini_batches}


def grpo_kwargs(config: TrainConfig, out: Path, num_processes: int = 1, use_cpu: bool = False) -> dict[str, Any]:
    """Keyword arguments of trl.GRPOConfig for this training config."""
    g, r = config.grpo, config.rollout
    layout = batch_layout(config, num_processes)
    return {
        "output_dir": str(out / "checkpoints"),
        "per_device_train_batch_size": g.micro_batch,
        "steps_per_generation": layout["steps_per_generation"],
        "gradient_accumulation_steps": layout["gradient_accumulation_steps"],
        "num_generations": g.num_generations,
        "max_steps": g.max_steps,
        "learning_rate": g.learning_rate,
        "lr_scheduler_type": g.lr_scheduler,
        "warmup_steps": g.warmup_steps,
        "weight_decay": g.weight_decay,
        "max_grad_norm": g.max_grad_norm,
        "beta": g.beta,
        "epsilon": g.epsilon,
        "epsilon_high": g.epsilon_high,
        "scale_rewards": g.scale_rewards,
        "loss_type": g.loss_type,
        "num_iterations": g.num_iterations,
        "mask_truncated_completions": False,  # by our records instead: TRL's guess from a final EOS misreads turns
        "max_completion_length": r.max_response_tokens,
        "temperature": r.temperature,
        "top_p": r.top_p,
        "use_vllm": False,
        "report_to": [],  # TensorBoard is added as a callback writing to OUT/tensorboard
        "logging_steps": 1,
        "save_strategy": "steps" if g.save_steps else "no",
        "save_steps": g.save_steps or 500,
        "save_total_limit": g.save_total_limit,
        "seed": g.seed,
        "bf16": g.precision == "bf16",
        "fp16": g.precision == "fp16",
        "gradient_checkpointing": g.gradient_checkpointing,
        "disable_tqdm": True,
        "remove_unused_columns": False,
        "use_cpu": use_cpu,
        **g.trl,
    }


def rloo_factors(scored: list[bool], num_generations: int, advantage: str = "rloo") -> list[float]:
    """What each rollout's TRL advantage is multiplied by (trl_trainer.py) to be RLOO's.

    TRL gets the true rewards, None for a masked rollout, and subtracts the mean of each group's scored
    rollouts (a masked one gets advantage 0 and adds nothing to the mean). RLOO subtracts the mean of
    the other k-1 scored rollouts of the group, which is the same difference times k/(k-1); no std
    division follows (see GRPOSettings). A group with one scored rollout has no baseline: its
    advantage is 0 either way. Scaling the advantages, not the rewards, keeps TRL's logged rewards true."""
    if len(scored) % num_generations:
        raise ValueError(f"{len(scored)} rollouts: not whole groups of {num_generations}")
    factors = []
    for start in range(0, len(scored), num_generations):
        k = sum(1 for s in scored[start:start + num_generations] if s)
        factor = k / (k - 1) if advantage == "rloo" and k > 1 else 1.0
        factors += [factor] * num_generations
    return factors
