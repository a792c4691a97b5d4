"""TRL's rollout hook, served by insandbox rollouts: the trainer's own model samples, real sandboxes
answer, and TRL trains on the records' ids with the environment's tokens masked out.

GRPOTrainer calls `rollout_func(prompts, trainer)` once per rollout batch with this process's
slice of the batch. Each prompt is a task id, repeated num_generations times in a row by TRL's
sampler (one group). For each group the hook runs num_generations rollouts of the task row, all
groups at once in sandboxes (Rollouts.run_groups), generation serialised on the model (with a
prefix cache, policy_sampler.py), and returns per rollout:

    prompt_ids        the record's prompt ids
    completion_ids    the record's response ids: model turns and environment answers
    env_mask          the record's response mask (1: sampled by the model, 0: environment);
                      all 0 for a masked rollout, and for a truncated one when grpo.mask_truncated is on
    logprobs          the sampler's log-probabilities (None at environment tokens): TRL carries them as
                      sampling_per_token_logps but, as configured here, computes the loss from its own
                      (see docs/rl/train.md: which log-probabilities are used)
    rollout_reward    the record's reward, read by the reward function TRL calls next
    rollout_scored    False for a masked rollout (record.masked: an infrastructure failure, a time
                      limit): the reward function gives TRL None, so it has no advantage and no
                      place in its group's baseline

Every record is written to OUT/rollouts/step-NNNNN.jsonl, checked with check_record first.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..rollout.check import check_record
from ..rollout.runner import Rollouts
from ..rollout.summary import summarize
from ..rollout.types import RolloutRecord


@dataclass
class RolloutBatch:
    """What one rollout batch gave: the step's rollout figures."""

    step: int
    summary: dict
    check_mismatches: int
    rollout_s: float
    model_tokens: int  # tokens the loss sees (env_mask 1)
    env_tokens: int  # environment tokens in the completions (env_mask 0)
    masked_truncated: int  # truncated rollouts left out of the loss (grpo.mask_truncated; they keep their reward)
    records_file: str
    problems: dict[str, list[str]] = field(default_factory=dict)
    # masked rollouts (no reward, no loss) by exit reason, and sandboxes broken by their own processes
    masked: dict[str, int] = field(default_factory=dict)
    broken_sandbox: int = 0


def task_groups(task_ids: list[str], n: int) -> list[str]:
    """The task of each group: TRL's sampler gives every task n times in a row."""
    if len(task_ids) % n:
        raise ValueError(f"the rollout hook got {len(task_ids)} prompts: not whole groups of {n}")
    groups = [task_ids[i:i + n] for i in range(0, len(task_ids), n)]
    for group in groups:
        if len(set(group)) != 1:
            raise ValueError(f"a group of the rollout batch mixes tasks: {sorted(set(group))}")
    return [group[0] for group in groups]


class SandboxRollouts:
    """The rollout_func handed to GRPOTrainer."""

    def __init__(self, rollouts: Rollouts, rows: dict[str, dict], out: Path, concurrency: int,
                 mask_truncated: bool = False):
        self.rollouts = rollouts
        self.rows = rows
        self.out = out
        self.concurrency = concurrency
        self.mask_truncated = mask_truncated
        self.batches: list[RolloutBatch] = []
        self.unlogged: Optional[RolloutBatch] = None  # the newest batch, until the reward function logs it
        self.last_scored: list[bool] = []  # per rollout of the newest batch: not masked (for the RLOO factors)

    def __call__(self, prompts: list, trainer: Any) -> dict[str, list]:
        from .policy_sampler import PrefixCachedSampler

        n = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
        tasks = task_groups([str(p) for p in prompts], n)
        model = trainer.accelerator.unwrap_model(trainer.model)
        sampler = PrefixCachedSampler(model, trainer.processing_class.pad_token_id)  # caches of these weights only
        was_training = model.training
        model.eval()  # no dropout while sampling; TransformersGenerator samples under no_grad
        t0 = time.perf_counter()
        try:
            records = asyncio.run(self.rollouts.run_groups([self.rows[t] for t in tasks], sampler, n=n,
                                                           concurrency=self.concurrency))
        finally:
            model.train(was_training)
            sampler.close()
        wall = time.perf_counter() - t0
        step = trainer.state.global_step + 1
        batch = self._keep(records, step, wall, trainer.accelerator.process_index, trainer.accelerator.num_processes)
        self.batches.append(batch)
        self.unlogged = batch
        self.last_scored = [not r.masked for r in records]
        return self._for_trl(records, trainer.processing_class.pad_token_id)

    # ------------------------------------------------------------------ records
    def _keep(self, records: list[RolloutRecord], step: int, wall: float, rank: int, ranks: int) -> RolloutBatch:
        folder = self.out / "rollouts"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / (f"step-{step:05d}.jsonl" if ranks == 1 else f"step-{step:05d}.rank-{rank}.jsonl")
        problems: dict[str, list[str]] = {}
        with open(path, "w", encoding="utf-8") as f:
            for record in records:
                found = check_record(record, self.rollouts.chat)
                if found:
                    problems[record.id] = found
                f.write(record.model_dump_json() + "\n")
        summary = summarize(records, wall)
        model_tokens = sum(sum(r.response_mask) for r in records if not self._no_loss(r))
        env_tokens = sum(len(r.response_mask) - sum(r.response_mask) for r in records)
        truncated = sum(1 for r in records if self._no_loss(r) and not r.masked)
        return RolloutBatch(step=step, summary=summary, check_mismatches=len(problems), rollout_s=wall,
                            model_tokens=model_tokens, env_tokens=env_tokens, masked_truncated=truncated,
                            records_file=str(path), problems=problems, masked=dict(summary["masked"]),
                            broken_sandbox=summary["broken_sandbox"])

    def _no_loss(self, record: RolloutRecord) -> bool:
        """Out of the loss: a masked rollout, or a truncated one when grpo.mask_truncated is on."""
        return record.masked or (self.mask_truncated and record.truncated)

    def _for_trl(self, records: list[RolloutRecord], pad_id: int) -> dict[str, list]:
        out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                                "rollout_reward": [], "rollout_scored": [], "rollout_id": []}
        for r in records:
            ids, mask = list(r.response_ids), list(r.response_mask)
            logprobs = list(r.response_logprobs) if r.response_logprobs is not None else [None] * len(ids)
            if not ids:  # the sampler failed before its first token: one pad token, out of the loss
                ids, mask, logprobs = [pad_id], [0], [None]
            if self._no_loss(r):
                mask = [0] * len(mask)
            out["prompt_ids"].append(list(r.prompt_ids))
            out["completion_ids"].append(ids)
            out["env_mask"].append(mask)
            out["logprobs"].append(logprobs)
            out["rollout_reward"].append(r.reward)
            out["rollout_scored"].append(not r.masked)
            out["rollout_id"].append(r.id)
        return out


def batch_metrics(batch: RolloutBatch) -> dict[str, float]:
    """The batch's figures as scalars (TensorBoard takes numbers only): exit reasons as counts each."""
    s = batch.summary
    scalars = {
        "rollout/reward_mean": s["reward_mean"],
        "rollout/reward_std": s["reward_std"],
        "rollout/groups_with_spread": s["groups_with_spread"],
        "rollout/rollouts_per_min": s["rollouts_per_min"],
        "rollout/tool_calls_per_rollout": s["tool_calls_per_rollout"],
        "rollout/turns_per_rollout": s["turns_per_rollout"],
        "rollout/response_tokens_mean": s["response_tokens_mean"],
        "rollout/model_tokens_mean": s["model_tokens_mean"],
        "rollout/truncated": s["truncated"],
        "rollout/sandbox_share": s["sandbox_share"],
        "rollout/generate_share": s["generate_share"],
        "rollout/check_mismatches": batch.check_mismatches,
        "rollout/trained_tokens": batch.model_tokens,
        "rollout/env_tokens": batch.env_tokens,
        "rollout/masked_truncated": batch.masked_truncated,
        "rollout/masked": sum(batch.masked.values()),
        "rollout/broken_sandbox": batch.broken_sandbox,
        "time/rollout_s": batch.rollout_s,
    }
    for reason, count in s["exit_reasons"].items():
        scalars[f"rollout/exit/{reason}"] = count
    for reason, count in batch.masked.items():
        scalars[f"rollout/masked/{reason}"] = count
    return {k: float(v) for k, v in scalars.items() if v is not None}


def records_of(path: Path) -> list[RolloutRecord]:
    return [RolloutRecord(**json.loads(line)) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]
