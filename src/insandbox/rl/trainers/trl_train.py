"""GRPO with TRL's GRPOTrainer, rollouts by insandbox in real sandboxes.

    config = load_config(Path("train.yaml"))
    result = train(config)        # OUT/final (HF checkpoint + tokenizer), metrics.jsonl, tensorboard/, rollouts/

The hook is TRL's `rollout_func` (rollout_hook.py), not its `environment_factory`: TRL's
environments re-render the conversation with the chat template each turn and call Python methods
as tools, while training here must see exactly the ids the policy sampled and the sandbox
answered, with the records and rewards the rest of insandbox uses.

Order of work: task rows -> the sandbox image -> the policy (load_s) -> GRPO steps, each one
rollout batch (rollout_s) then scoring, forward, backward and the optimizer (train_s) -> the
final checkpoint (save_s). OUT/summary.json keeps these and the run's totals.
"""
from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from ..rollout.runner import RewardFn, Rollouts
from ..schema import read_task_rows
from .config import ConfigError, TrainConfig


@dataclass
class TrainResult:
    out: Path
    final: Path  # the final checkpoint (HF format, tokenizer included)
    steps: int
    rows: list[dict] = field(default_factory=list)  # metrics.jsonl's rows
    phases: dict[str, float] = field(default_factory=dict)  # load_s, rollout_s, train_s, save_s, total_s
    rows_left_out: int = 0  # task rows whose prompt is over grpo.max_prompt_tokens


def read_rows(config: TrainConfig) -> list[dict]:
    """The task rows (validated, ids unique), the first `limit` of them: from a file, a save_to_disk
    folder or a hub dataset (rl/schema.py: read_task_rows)."""
    from ...core.data_source import DataError

    if config.data is None:
        raise ConfigError("no task rows: pass --data ROWS (a JSONL from `insandbox rl build-data`, a save_to_disk "
                          "folder, or hf:NAME[:CONFIG[:SPLIT]]) or set data: in the config")
    try:
        return read_task_rows(config.data, config.limit, command="rl train")
    except DataError as e:
        raise ConfigError(f"data {e}") from None


def fit_prompts(rows: list[dict], rollouts: Rollouts, max_prompt_tokens: Optional[int]) -> list[dict]:
    """The rows whose prompt (system prompt, tools and task, as the policy sees them) fits the budget."""
    if max_prompt_tokens is None:
        return rows
    from ...agent.env import SandboxEnv, Task

    env = SandboxEnv(rollouts.env_template)
    return [row for row in rows if len(rollouts.chat.prompt_ids(env.prompt_messages(
        Task(prompt=str(row["problem_statement"]), id=row["id"])))) <= max_prompt_tokens]


def prepare_image(config: TrainConfig) -> None:
    from ...config import RunConfig, SandboxSettings
    from ...runs.session import prepare_sandbox

    r = config.rollout
    # the rollouts' sandbox settings are a run's (config/sections.py: SandboxSettings)
    asyncio.run(prepare_sandbox(RunConfig(**{k: getattr(r, k) for k in SandboxSettings.model_fields})))


def train(config: TrainConfig, reward_fn: Optional[RewardFn] = None,
          echo: Callable[[str], None] = print) -> TrainResult:
    """Run GRPO as configured; `reward_fn` replaces compute_reward (same signature)."""
    from .grpo_args import batch_layout, grpo_kwargs

    # what can be checked without loading anything heavy is checked first
    if config.out is None:
        raise ConfigError("no output folder: pass --out DIR or set out: in the config")
    out = config.out
    t0 = time.perf_counter()
    rows = read_rows(config)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL 1.x
    import torch
    from accelerate import PartialState
    from datasets import Dataset
    from transformers import PrinterCallback, ProgressCallback
    from transformers.integrations import TensorBoardCallback
    from trl import GRPOConfig

    from .metrics import StepLog
    from .policy import align_turn_end, load_policy_model
    from .reward_func import make_reward_func
    from .rollout_hook import SandboxRollouts
    from .trl_trainer import InSandboxGRPOTrainer

    state = PartialState()
    batch_layout(config, state.num_processes)  # before the image and the model
    if config.grpo.async_steps and state.num_processes > 1:
        raise ConfigError(f"grpo.async_steps {config.grpo.async_steps}: rollouts ahead run on one process only "
                          f"(this run has {state.num_processes}); set async_steps 0 under accelerate")
    prepare_image(config)
    model, tokenizer = load_policy_model(config)
    rollouts = Rollouts(tokenizer, config.rollout, config.reward_config(), reward_fn=reward_fn)
    align_turn_end(model, tokenizer, rollouts.chat.stop_token_ids)
    fitting = fit_prompts(rows, rollouts, config.grpo.max_prompt_tokens)
    if not fitting:
        raise ConfigError(f"no task row's prompt fits grpo.max_prompt_tokens ({config.grpo.max_prompt_tokens})")
    load_s = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False),
                                     encoding="utf-8")
    (out / "metrics.jsonl").write_text("", encoding="utf-8")
    echo(f"[train] {len(fitting)} task rows ({len(rows) - len(fitting)} over the prompt budget), model "
         f"{config.model}, loaded in {load_s:.0f}s; {config.grpo.max_steps} steps of {config.grpo.prompts_per_step} "
         f"prompts x {config.grpo.num_generations} rollouts -> {out}")

    args = GRPOConfig(**grpo_kwargs(config, out, state.num_processes, use_cpu=not torch.cuda.is_available()))
    hook = SandboxRollouts(rollouts, {row["id"]: row for row in fitting}, out, config.concurrency,
                           config.grpo.mask_truncated, async_steps=config.grpo.async_steps,
                           max_staleness=config.max_staleness(), steps_per_batch=config.steps_per_batch())
    steps = StepLog(out, hook, echo)
    callbacks: list[Any] = [steps]
    if config.grpo.async_steps:
        from .async_rollouts import stage_weights_callback

        callbacks.append(stage_weights_callback(hook))
    if state.is_main_process:
        from torch.utils.tensorboard import SummaryWriter

        callbacks.append(TensorBoardCallback(SummaryWriter(log_dir=str(out / "tensorboard"))))
    trainer = InSandboxGRPOTrainer(model=model, reward_funcs=[make_reward_func(hook)], args=args,
                                   train_dataset=Dataset.from_list([{"prompt": row["id"]} for row in fitting]),
                                   processing_class=tokenizer, hook=hook, advantage=config.grpo.advantage,
                                   importance_cap=config.grpo.importance_cap, callbacks=callbacks)
    for noisy in (PrinterCallback, ProgressCallback):  # the console gets StepLog's one line per step
        trainer.remove_callback(noisy)
    try:
        trainer.train()
    finally:
        hook.close()  # the producer thread, if any

    t_save = time.perf_counter()
    final = out / "final"
    trainer.save_model(str(final))
    tokenizer.save_pretrained(str(final))
    save_s = time.perf_counter() - t_save
    rollout_s = sum(b.rollout_s for b in hook.batches)
    train_s = sum(r["time"]["train_s"] for r in steps.rows)
    phases = {"load_s": round(load_s, 2), "rollout_s": round(rollout_s, 2), "train_s": round(train_s, 2),
              "save_s": round(save_s, 2), "total_s": round(time.perf_counter() - t0, 2)}
    summary = {"steps": trainer.state.global_step, "phases": phases, "final": str(final),
               "rollouts": sum(b.summary["rollouts"] for b in hook.batches),
               "check_mismatches": sum(b.check_mismatches for b in hook.batches),
               "rows": len(fitting), "rows_left_out": len(rows) - len(fitting),
               "stale_dropped": sum(b.stale_dropped for b in hook.batches),
               "async": {"async_steps": config.grpo.async_steps, "max_staleness": hook.max_staleness,
                         "batches_ahead": sum(b.ahead for b in hook.batches),
                         "plan_mismatches": sum(b.plan_mismatch for b in hook.batches),
                         "rollout_wait_s": round(sum(b.waited_s for b in hook.batches), 2)},
               "trl": {k: v for k, v in steps.final.items() if isinstance(v, (int, float))}}
    (out / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    echo(f"[train] done: {summary['steps']} steps, {summary['rollouts']} rollouts, checkpoint {final}; "
         f"load {load_s:.0f}s, rollouts {rollout_s:.0f}s, train {train_s:.0f}s, save {save_s:.0f}s")
    return TrainResult(out=out, final=final, steps=trainer.state.global_step, rows=steps.rows, phases=phases,
                       rows_left_out=len(rows) - len(fitting))
