"""The synchronous rollout hook and trainer as they were before asynchronous rollouts (commit de064f2),
frozen here so that tests can show grpo.async_steps 0 gives what they gave."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Optional

import torch
from trl import GRPOTrainer

from insandbox.rl.rollout.check import check_record
from insandbox.rl.rollout.runner import Rollouts
from insandbox.rl.rollout.summary import summarize
from insandbox.rl.rollout.types import RolloutRecord
from insandbox.rl.trainers.grpo_args import rloo_factors
from insandbox.rl.trainers.policy_sampler import PrefixCachedSampler
from insandbox.rl.trainers.rollout_hook import RolloutBatch, task_groups


class SandboxRolloutsBefore:
    """The rollout_func as it was (synchronous, no versions)."""

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


class InSandboxGRPOTrainerBefore(GRPOTrainer):
    def __init__(self, *args: Any, hook: SandboxRolloutsBefore, advantage: str = "rloo", **kwargs: Any):
        super().__init__(*args, rollout_func=hook, **kwargs)
        self.insandbox_hook = hook
        self.insandbox_advantage = advantage

    def _generate_and_score_completions(self, inputs: list[dict]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        scored = self.insandbox_hook.last_scored
        if self.insandbox_advantage == "rloo" and self.model.training and scored:
            advantages = output["advantages"]
            if len(scored) != advantages.shape[0]:  # never silently misaligned
                raise RuntimeError(f"{len(scored)} rollout records for {advantages.shape[0]} advantages")
            factors = torch.tensor(rloo_factors(scored, self.num_generations), dtype=advantages.dtype,
                                   device=advantages.device)
            output["advantages"] = advantages * factors
        return output
