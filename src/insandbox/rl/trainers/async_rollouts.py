"""Rollouts produced ahead of the trainer (grpo.async_steps = k >= 1), within k rollout batches.

    trainer thread                          producer thread (its own asyncio loop)
    step s: take batch s (wait if not ready)    batch s+1: Rollouts.run_groups with the rollout copy
            score, forward, backward, optimizer       ... every generate call: staged weights go in first
            stage the new weights (version s)   batch s+2: starts once the copy holds version >= s+1-k

Three pieces:

  RolloutWeights  a separate copy of the policy that the rollouts sample with, and its version (the
                  optimizer steps its weights reflect). After each optimizer step the trainer stages
                  its weights (a copy into buffers of the same shapes); the copy takes them in at the
                  start of the next generate call, never during one: a weight update in flight at the
                  granularity of a turn, each turn stamped with the version that sampled it.
  plan_batches    the task ids of the rollout batches TRL will ask for, from a fresh copy of TRL's own
                  train sampler (GRPOTrainer._get_train_sampler, the same seed); the rollout hook checks
                  every call against it and produces a batch synchronously where TRL asks otherwise.
  AheadProducer   the thread producing the planned batches in order; batch b (the one trained at
                  global step v0 + b*m, m optimizer steps per batch) starts only once the copy holds
                  weights of version >= v0 + (b-k)*m: it is never more than k batches ahead.

One process only: under several processes k >= 1 is refused (trl_train.py). The manual: docs/rl/train.md
('Asynchronous rollouts').
"""
from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Optional

from ..rollout.runner import Rollouts
from ..rollout.types import RolloutRecord


def rollouts_for_thread(rollouts: Rollouts) -> Rollouts:
    """The same rollouts with their own tokenizer and chat format (a Rust tokenizer used from two threads
    at once fails with "Already borrowed") and no pool of the other's."""
    mine = copy.copy(rollouts)
    mine.chat = copy.deepcopy(rollouts.chat)
    mine.tokenizer = mine.chat.tokenizer
    mine.pool = None
    return mine


class RolloutWeights:
    """The rollout copy of the policy, its version, and the trained weights staged for it."""

    def __init__(self, model: Any, version: int):
        self.model = copy.deepcopy(model)
        self.model.eval()  # no dropout while sampling
        self.model.requires_grad_(False)
        self.version = version
        self._params = list(self.model.parameters())
        self._turn = threading.Lock()  # held through a generate call, and while staged weights go in
        self._staged = threading.Condition()  # guards the staging buffers and their version
        self._buffers: Optional[list[Any]] = None
        self._staged_version = version
        # ("generate", version, "start"/"end") and ("applied", version), in order (the newest only: a long run
        # makes two per turn)
        self.events: deque[tuple] = deque(maxlen=100_000)

    def stage(self, model: Any, version: int) -> None:
        """The trainer's weights after an optimizer step (trainer thread): copied now, taken in later."""
        import torch

        with self._staged, torch.no_grad():
            params = list(model.parameters())
            if len(params) != len(self._params):
                raise RuntimeError(f"the trained model has {len(params)} parameters, the rollout copy "
                                   f"{len(self._params)}")
            if self._buffers is None:
                self._buffers = [p.detach().clone() for p in params]
            else:
                for buffer, p in zip(self._buffers, params):
                    buffer.copy_(p.detach())
            self._staged_version = version
            self._staged.notify_all()

    def _take_staged(self) -> int:
        """Staged weights into the copy, if newer (the caller holds the turn lock: no generate call runs)."""
        import torch

        with self._staged:
            if self._buffers is not None and self._staged_version > self.version:
                with torch.no_grad():
                    for p, buffer in zip(self._params, self._buffers):
                        p.copy_(buffer)
                self.version = self._staged_version
                self.events.append(("applied", self.version))
        return self.version

    @contextmanager
    def turn(self) -> Iterator[int]:
        """One generate call: staged weights go in first, none while it runs; yields the version it samples with."""
        with self._turn:
            version = self._take_staged()
            self.events.append(("generate", version, "start"))
            try:
                yield version
            finally:
                self.events.append(("generate", version, "end"))

    def wait_for(self, version: int, stop: threading.Event) -> int:
        """Block until weights of at least `version` are staged (or `stop`), take them in, give the version."""
        with self._staged:
            while self._staged_version < version and not stop.is_set():
                self._staged.wait(0.2)
        with self._turn:
            return self._take_staged()


def plan_batches(trainer: Any, batches: int) -> list[list[str]]:
    """The prompts (task ids) of the next `batches` rollout batches TRL will ask for, in order.

    TRL's train dataloader draws from its RepeatSampler in batches of one generation batch, each
    chunk of the sampler repeated steps_per_generation x num_iterations times (TRL generates on the
    first of them and trains on the stored batch for the rest); an epoch is one pass of the sampler
    (its generator carries on from epoch to epoch). A fresh sampler with the same seed gives the
    same order; the hook still checks every call against the plan."""
    sampler = trainer._get_train_sampler(trainer.train_dataset)
    size = trainer.args.generation_batch_size  # one process: the whole generation batch
    repeat = trainer.args.steps_per_generation * trainer.num_iterations
    prompts = trainer.train_dataset["prompt"]
    plan: list[list[str]] = []
    while len(plan) < batches:
        order = list(iter(sampler))
        if len(order) < size:
            break  # fewer rows than a batch: TRL gives no batch either
        chunks = [order[i:i + size] for i in range(0, len(order) - size + 1, size)]
        plan += [[str(prompts[i]) for i in chunk] for chunk in chunks[::repeat]]
    return plan[:batches]


@dataclass
class Produced:
    """One rollout batch the producer finished."""

    index: int
    records: list[RolloutRecord]
    rollout_s: float  # wall time of its run_groups
    started: float  # time.perf_counter() at its start
    version_at_start: int


@dataclass
class AheadProducer:
    """Produces the planned batches on its own thread, never more than `ahead` batches before the trainer."""

    rollouts: Rollouts  # its own (its own tokenizer: a Rust tokenizer is not shared across threads)
    rows: dict[str, dict]
    plan: list[list[str]]
    weights: RolloutWeights
    n: int
    concurrency: int
    ahead: int
    steps_per_batch: int
    pad_token_id: Optional[int]
    base_version: int  # the trainer's global step at the first batch
    events: list[tuple] = field(default_factory=list)  # ("start", b, version) ("done", b) ("taken", b, step)
    done: dict[int, Produced] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._error: Optional[BaseException] = None
        self._finished = False
        self._discarded: set[int] = set()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._task: Optional[asyncio.Task] = None
        self._thread = threading.Thread(target=self._run, name="insandbox-rollouts-ahead", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def needed_version(self, index: int) -> int:
        """The oldest weights batch `index` may be sampled with: k batches before the one it is trained at."""
        return self.base_version + (index - self.ahead) * self.steps_per_batch

    # ------------------------------------------------------------------ producer thread
    def _run(self) -> None:
        from .policy_sampler import PrefixCachedSampler

        self._loop = asyncio.new_event_loop()
        try:
            for index, prompts in enumerate(self.plan):
                version = self.weights.wait_for(self.needed_version(index), self._stop)
                if self._stop.is_set():
                    break
                tasks = [prompts[i] for i in range(0, len(prompts), self.n)]
                sampler = PrefixCachedSampler(None, self.pad_token_id, weights=self.weights)
                started = time.perf_counter()
                with self._cond:
                    self.events.append(("start", index, version))
                try:
                    self._task = self._loop.create_task(self.rollouts.run_groups(
                        [self.rows[t] for t in tasks], sampler, n=self.n, concurrency=self.concurrency))
                    records = self._loop.run_until_complete(self._task)
                finally:
                    self._task = None
                    sampler.close()
                with self._cond:
                    if index in self._discarded:  # TRL asked for other prompts: nobody will take it
                        continue
                    self.done[index] = Produced(index, records, time.perf_counter() - started, started, version)
                    self.events.append(("done", index))
                    self._cond.notify_all()
        except BaseException as e:  # handed to the trainer thread by take()
            with self._cond:
                self._error = e
        finally:
            with self._cond:
                self._finished = True
                self._cond.notify_all()
            self._loop.close()

    # ------------------------------------------------------------------ trainer thread
    def take(self, index: int, step: int) -> Produced:
        """Batch `index`, waiting for it if it is not done yet."""
        with self._cond:
            while index not in self.done:
                if self._error is not None:
                    raise RuntimeError(f"the rollout producer failed: {self._error!r}") from self._error
                if self._finished:
                    raise RuntimeError(f"the rollout producer stopped before batch {index}")
                self._cond.wait(0.5)
            self.events.append(("taken", index, step))
            return self.done.pop(index)

    def discard(self, index: int) -> None:
        """Batch `index` will not be used (TRL asked for other prompts): forget it once it is done."""
        with self._cond:
            self._discarded.add(index)
            self.done.pop(index, None)
            self.events.append(("discarded", index))

    def close(self) -> None:
        self._stop.set()
        loop, task = self._loop, self._task
        if task is not None and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)  # the rollouts remove their sandboxes as they unwind
        if self._thread.is_alive():
            self._thread.join(timeout=120)


def stage_weights_callback(hook: Any) -> Any:
    """A TrainerCallback: after each optimizer step the trained weights are staged for the rollout copy
    (hook.optimizer_stepped); at the end of training the producer stops."""
    from transformers import TrainerCallback

    class StageWeights(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            if model is not None:
                hook.optimizer_stepped(model, state.global_step)

        def on_train_end(self, args, state, control, **kwargs):
            hook.close()

    return StageWeights()
