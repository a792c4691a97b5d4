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

Policy versions: every sampled turn carries the version of the weights that sampled it (the
optimizer steps they reflect; synchronously the trainer's global step). A record sampled more than
grpo.max_staleness versions before the weights it is trained from is dropped from the loss the way
a masked rollout is (env_mask all 0, not scored) and counted (rollout/stale_dropped).

grpo.async_steps = k >= 1: the batches are produced ahead on a thread with a copy of the policy
(async_rollouts.py), at most k batches before the trainer; each call takes the planned batch if
TRL's prompts are the planned ones, else produces it synchronously here (counted: plan_mismatch).
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
from ..rollout.staleness import split_stale
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
    wait_s: Optional[float] = None  # the trainer's wait for this batch (None: the whole rollout_s, synchronous)
    stale_dropped: int = 0  # records older than grpo.max_staleness: out of the loss, unscored
    staleness_max: Optional[int] = None  # versions between the oldest sampler of the batch and the trainer
    ahead: bool = False  # produced ahead by the producer thread (grpo.async_steps)
    plan_mismatch: bool = False  # asynchronous, but TRL asked for other prompts than planned: produced here

    @property
    def waited_s(self) -> float:
        return self.rollout_s if self.wait_s is None else self.wait_s


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
                 mask_truncated: bool = False, async_steps: int = 0, max_staleness: Optional[int] = None,
                 steps_per_batch: int = 1):
        self.rollouts = rollouts
        self.rows = rows
        self.out = out
        self.concurrency = concurrency
        self.mask_truncated = mask_truncated
        self.async_steps = async_steps  # k: batches produced at most this far ahead (0: synchronous)
        self.steps_per_batch = steps_per_batch  # optimizer steps per rollout batch (versions count steps)
        # versions a record may lag the trainer's weights (default: what k batches ahead can give)
        self.max_staleness = async_steps * steps_per_batch if max_staleness is None else max_staleness
        self.batches: list[RolloutBatch] = []
        self.unlogged: Optional[RolloutBatch] = None  # the newest batch, until the reward function logs it
        self.last_scored: list[bool] = []  # per rollout of the newest batch: not masked (for the RLOO factors)
        # per rollout of the newest batch, per completion token: the version that sampled it (None: environment)
        self.last_token_versions: list[list[Optional[int]]] = []
        self.producer: Any = None  # async_rollouts.AheadProducer, from the first asynchronous call
        self.weights: Any = None  # async_rollouts.RolloutWeights: the rollout copy of the policy
        self.train_calls = 0  # training batches asked for so far (the index into the plan)
        self._dropped: set[str] = set()  # ids of the newest batch's records out of the loss as stale

    def __call__(self, prompts: list, trainer: Any) -> dict[str, list]:
        training = trainer.model.training
        n = trainer.num_generations if training else trainer.num_generations_eval
        names = [str(p) for p in prompts]
        tasks = task_groups(names, n)
        produced, waited, mismatch = None, None, False
        if self.async_steps and training:
            produced, waited = self._take_ahead(names, trainer)
            mismatch = produced is None
        if produced is not None:
            records, wall = produced.records, produced.rollout_s
        else:
            records, wall = self._sample_now(tasks, n, trainer)
        current = trainer.state.global_step  # the weights this batch is trained from
        sampled = [r for r in records if r.policy_versions]  # a record with no sampled turn has no age
        split = split_stale(sampled, current, self.max_staleness)
        self._dropped = {r.id for r in split.stale + split.unversioned}
        batch = self._keep(records, current + 1, wall, trainer.accelerator.process_index,
                           trainer.accelerator.num_processes)
        batch.wait_s, batch.ahead, batch.plan_mismatch = waited, produced is not None, mismatch
        batch.stale_dropped = split.dropped
        versions = [r.policy_version for r in sampled if r.policy_version is not None]
        batch.staleness_max = current - min(versions) if versions else None
        self.batches.append(batch)
        self.unlogged = batch
        self.last_scored = [self._scored(r) for r in records]
        return self._for_trl(records, trainer.processing_class.pad_token_id)

    def _sample_now(self, tasks: list[str], n: int, trainer: Any) -> tuple[list[RolloutRecord], float]:
        """The batch sampled here and now with the trainer's own model (its version: the global step)."""
        from .policy_sampler import PrefixCachedSampler

        model = trainer.accelerator.unwrap_model(trainer.model)
        # caches of these weights only
        sampler = PrefixCachedSampler(model, trainer.processing_class.pad_token_id,
                                      version=trainer.state.global_step)
        was_training = model.training
        model.eval()  # no dropout while sampling; TransformersGenerator samples under no_grad
        t0 = time.perf_counter()
        try:
            records = asyncio.run(self.rollouts.run_groups([self.rows[t] for t in tasks], sampler, n=n,
                                                           concurrency=self.concurrency))
        finally:
            model.train(was_training)
            sampler.close()
        return records, time.perf_counter() - t0

    def _take_ahead(self, names: list[str], trainer: Any) -> tuple[Any, Optional[float]]:
        """The producer's batch for this call and the wait for it; (None, None) when TRL's prompts are not
        the planned ones (the batch is then produced synchronously)."""
        index = self.train_calls
        self.train_calls += 1
        if self.producer is None:
            self._start_producer(trainer)
        plan = self.producer.plan
        if index >= len(plan) or plan[index] != names:
            self.producer.discard(index)
            return None, None
        t0 = time.perf_counter()
        produced = self.producer.take(index, trainer.state.global_step)
        return produced, time.perf_counter() - t0

    def _start_producer(self, trainer: Any) -> None:
        from .async_rollouts import AheadProducer, RolloutWeights, plan_batches, rollouts_for_thread

        if trainer.accelerator.num_processes > 1:
            raise RuntimeError("grpo.async_steps >= 1 runs on one process only (got "
                               f"{trainer.accelerator.num_processes}); use async_steps 0 under accelerate")
        step = trainer.state.global_step
        self.weights = RolloutWeights(trainer.accelerator.unwrap_model(trainer.model), step)
        batches = -(-(trainer.state.max_steps - step) // self.steps_per_batch)
        self.producer = AheadProducer(
            rollouts=rollouts_for_thread(self.rollouts), rows=self.rows, plan=plan_batches(trainer, batches),
            weights=self.weights, n=trainer.num_generations, concurrency=self.concurrency, ahead=self.async_steps,
            steps_per_batch=self.steps_per_batch, pad_token_id=trainer.processing_class.pad_token_id,
            base_version=step)
        self.producer.start()

    def optimizer_stepped(self, model: Any, global_step: int) -> None:
        """After an optimizer step (trainer thread): the trained weights, staged for the rollout copy."""
        if self.weights is not None:
            self.weights.stage(model, global_step)

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close()

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
        truncated = sum(1 for r in records if self.mask_truncated and r.truncated and self._scored(r))
        return RolloutBatch(step=step, summary=summary, check_mismatches=len(problems), rollout_s=wall,
                            model_tokens=model_tokens, env_tokens=env_tokens, masked_truncated=truncated,
                            records_file=str(path), problems=problems, masked=dict(summary["masked"]),
                            broken_sandbox=summary["broken_sandbox"])

    def _no_loss(self, record: RolloutRecord) -> bool:
        """Out of the loss: a masked rollout, a stale one, or a truncated one when grpo.mask_truncated is on."""
        return not self._scored(record) or (self.mask_truncated and record.truncated)

    def _scored(self, record: RolloutRecord) -> bool:
        """In its group's baseline with its reward: neither masked nor dropped as stale."""
        return not record.masked and record.id not in self._dropped

    def _for_trl(self, records: list[RolloutRecord], pad_id: int) -> dict[str, list]:
        out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                                "rollout_reward": [], "rollout_scored": [], "rollout_id": []}
        self.last_token_versions = []
        for r in records:
            ids, mask = list(r.response_ids), list(r.response_mask)
            logprobs = list(r.response_logprobs) if r.response_logprobs is not None else [None] * len(ids)
            versions = token_versions(r)
            if not ids:  # the sampler failed before its first token: one pad token, out of the loss
                ids, mask, logprobs, versions = [pad_id], [0], [None], [None]
            if self._no_loss(r):
                mask = [0] * len(mask)
            out["prompt_ids"].append(list(r.prompt_ids))
            out["completion_ids"].append(ids)
            out["env_mask"].append(mask)
            out["logprobs"].append(logprobs)
            out["rollout_reward"].append(r.reward)
            out["rollout_scored"].append(self._scored(r))
            out["rollout_id"].append(r.id)
            self.last_token_versions.append(versions)
        return out


def token_versions(record: RolloutRecord) -> list[Optional[int]]:
    """Per response token: the policy version that sampled it (None for the environment's tokens).

    A turn's tokens are one run of mask 1 (the environment's answer and the chat template's glue lie
    between two turns); when the runs and the turns' versions do not pair up one to one (a turn that
    sampled nothing), every model token gets the record's oldest version."""
    mask, turn_versions = record.response_mask, list(record.policy_versions)
    starts = [i for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1])]
    paired = len(starts) == len(turn_versions)
    out: list[Optional[int]] = []
    turn = -1
    for i, m in enumerate(mask):
        if m and (i == 0 or not mask[i - 1]):
            turn += 1
        out.append(None if not m else turn_versions[turn] if paired else record.policy_version)
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
        "rollout/stale_dropped": batch.stale_dropped,
        "rollout/staleness_max": batch.staleness_max,
        "rollout/ahead": int(batch.ahead),
        "rollout/plan_mismatch": int(batch.plan_mismatch),
        "time/rollout_s": batch.rollout_s,
        "time/rollout_wait_s": batch.waited_s,
    }
    for reason, count in s["exit_reasons"].items():
        scalars[f"rollout/exit/{reason}"] = count
    for reason, count in batch.masked.items():
        scalars[f"rollout/masked/{reason}"] = count
    return {k: float(v) for k, v in scalars.items() if v is not None}


def records_of(path: Path) -> list[RolloutRecord]:
    return [RolloutRecord(**json.loads(line)) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]
