"""The training config as TRL's GRPOConfig: what maps onto which field, in one place.

    grpo.num_generations      -> num_generations (a group of rollouts per prompt)
    grpo.prompts_per_step     -> with num_generations, the rollout batch: per_device_train_batch_size
    grpo.micro_batch             (micro_batch) x steps_per_generation x processes = prompts x generations
    grpo.mini_batches         -> gradient_accumulation_steps = steps_per_generation / mini_batches
    grpo.beta, epsilon, epsilon_high, scale_rewards, loss_type, num_iterations -> the same names
    grpo.advantage            -> rloo: the rewards handed to TRL are scaled by G/(G-1) (see rewards_for_trl)
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

from .config import ConfigError, TrainConfig

MAPPED_FIELDS = {
    "output_dir", "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
    "generation_batch_size", "num_generations", "max_steps", "learning_rate", "lr_scheduler_type", "warmup_steps",
    "weight_decay", "max_grad_norm", "beta", "epsilon", "epsilon_high", "scale_rewards", "loss_type",
    "num_iterations", "mask_truncated_completions", "max_completion_length", "temperature", "top_p", "use_vllm",
    "report_to", "logging_steps", "save_strategy", "save_steps", "save_total_limit", "seed", "bf16", "fp16",
    "gradient_checkpointing", "disable_tqdm", "remove_unused_columns", "use_cpu",
}


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


def rewards_for_trl(rewards: list[float], config: TrainConfig) -> list[float]:
    """The rewards TRL turns into advantages. TRL subtracts the group mean; RLOO subtracts the mean of
    the other G-1 rollouts, which is the same difference scaled by G/(G-1): scaling the rewards by it
    makes TRL's advantage exactly RLOO's (no std division follows, see GRPOSettings)."""
    if config.grpo.advantage != "rloo":
        return list(rewards)
    g = config.grpo.num_generations
    return [r * g / (g - 1) for r in rewards]
