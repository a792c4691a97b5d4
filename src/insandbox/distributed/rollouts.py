"""`insandbox rl rollout --ray`: token-level rollouts whose sandboxes run on the nodes of a Ray cluster.

The policy stays in one place, as in training: a `PolicyServer` actor on the driver's node loads
it (or whatever `load_policy` gives) and answers `generate(context ids, params)`. Each node has a
`RolloutNode` worker (cluster.py) running many rollouts at once in its own sandboxes, sampling
through the policy actor. A record comes back to the driver whole (token ids, masks, trajectory)
and is written there as it arrives. A rollout whose node is lost runs again from the start on
another node (a rollout keeps no state outside its record).
"""
from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from ..config import RunConfig
from ..rl.rewards import RewardConfig
from ..rl.rollout.output import RolloutsResult, write_rollouts
from ..rl.rollout.runner import RolloutConfig, Rollouts
from ..rl.rollout.types import GenerateFn, RolloutRecord, Sampled, SamplingParams
from .cluster import NodePool, NoNodesLeft, ray_module

PolicyLoader = Callable[[], tuple[Any, GenerateFn]]  # () -> (tokenizer, generate)


class PolicyServer:
    """The policy for every node (an async actor: many turns are sampled at once)."""

    def __init__(self, load: PolicyLoader):
        self._tokenizer, self._generate = load()

    async def tokenizer(self) -> Any:
        return self._tokenizer

    async def generate(self, context: list[int], params: SamplingParams) -> Sampled:
        return await self._generate(context, params)


class RolloutNode:
    """The worker on one node: rollouts in this node's sandboxes, sampled by the policy actor."""

    def __init__(self, tokenizer: Any, config: RolloutConfig, reward: RewardConfig, policy: Any):
        self.rollouts = Rollouts(tokenizer, config, reward)
        self.policy = policy
        self._ready: Optional[asyncio.Future] = None
        self._running: set[asyncio.Task] = set()  # rollouts in flight, cancelled by `close`

    async def _generate(self, context: list[int], params: SamplingParams) -> Sampled:
        return await self.policy.generate.remote(context, params)

    async def run(self, row: dict, group: int, sample: int) -> RolloutRecord:
        task = asyncio.current_task()
        self._running.add(task)
        try:
            return await self._run(row, group, sample)
        finally:
            self._running.discard(task)

    async def close(self) -> None:
        """Rollouts still running here are cancelled (their sandboxes removed)."""
        for task in self._running:
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)

    async def _run(self, row: dict, group: int, sample: int) -> RolloutRecord:
        from ..runs.session import prepare_sandbox

        if self._ready is None:  # the node's image, built on first use
            self._ready = asyncio.ensure_future(prepare_sandbox(RunConfig(image=self.rollouts.config.image,
                                                                          build_image=True)))
        try:
            await asyncio.shield(self._ready)
        except Exception:
            self._ready = None
            raise
        return await self.rollouts.run(row, self._generate, group=group, sample=sample)


class RayRollouts:
    """Rollouts.run_groups over a Ray cluster."""

    def __init__(self, load_policy: PolicyLoader, config: RolloutConfig, reward: RewardConfig, concurrency: int):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = ray_module()
        here = ray.get_runtime_context().get_node_id()
        self.policy = ray.remote(PolicyServer).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False), num_cpus=0,
            max_concurrency=max(concurrency, 1) + 1).remote(load_policy)
        self.tokenizer = ray.get(self.policy.tokenizer.remote())
        self.pool = NodePool(RolloutNode, (self.tokenizer, config, reward, self.policy),
                             max_concurrency=concurrency + 1)
        self.concurrency = concurrency
        self.config, self.reward = config, reward
        self.nodes_used: Counter[str] = Counter()
        self.moved = 0  # rollouts run again after their node was lost

    async def run_groups(self, rows: list[dict], n: int,
                         on_record: Optional[Callable[[RolloutRecord], None]] = None) -> list[RolloutRecord]:
        """n rollouts of every row, at most `concurrency` at once over all nodes; records in row
        order, then sample order (as Rollouts.run_groups)."""
        gate = asyncio.Semaphore(self.concurrency)

        async def one(i: int, row: dict, k: int) -> RolloutRecord:
            async with gate:
                record, node, lost = await self.pool.call("run", row, i, k)
            self.nodes_used[node.address + "/" + node.id[:8]] += 1
            self.moved += bool(lost)
            if on_record:
                on_record(record)
            return record

        tasks = [asyncio.ensure_future(one(i, row, k)) for i, row in enumerate(rows) for k in range(n)]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def run_all(self, rows: list[dict], folder: Path, n: int = 1) -> RolloutsResult:
        """run_groups, written to `folder` as Rollouts.run_all writes it (rl/rollout/output.py), the
        decode check done here, and this cluster's figures in the summary under "ray"."""
        chat = Rollouts(self.tokenizer, self.config, self.reward).chat
        return await write_rollouts(folder, chat, lambda write: self.run_groups(rows, n, on_record=write),
                                    extra={"ray": self.summary})

    def summary(self) -> dict:
        return {"nodes": len(self.pool.nodes), "rollouts_per_node": dict(self.nodes_used),
                "rollouts_run_again": self.moved, "nodes_lost": self.pool.lost}

    async def close(self) -> None:
        await self.pool.close("close")
        try:
            ray_module().kill(self.policy, no_restart=True)
        except Exception:
            pass


__all__ = ["NoNodesLeft", "PolicyServer", "RayRollouts", "RolloutNode"]
