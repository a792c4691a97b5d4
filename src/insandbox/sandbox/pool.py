"""A pool of started sandboxes: samples take a ready one, and give it back to be recycled.

The Docker engine spends ~100 ms of CPU to start a container and ~60 ms to remove one, one
after the other (measured: benchmarks/bench_pool.py), so at a few samples a second the engine,
not the model, sets the pace. The pool takes both off the samples' path:

- `acquire()` hands out a warm sandbox at once when one is waiting, or waits for one being
  recycled or started; it starts a new one only when none is on its way for it;
- `release()` returns at once: the sandbox is recycled in the background (every process
  killed, the filesystem restored to the image's, a fresh shell: DockerSandbox.recycle) and
  waits for the next sample, or is removed when recycling is off or impossible, failed, or it
  served `max_uses` samples;
- `expect(n)` tells the pool how many samples are still to come, so it pre-starts up to
  `size` sandboxes while samples run (none beyond what is still needed) and removes the
  waiting ones nobody will ask for.

Sandboxes whose removal is due go through one remover that takes them a few at a time, so
removing never competes with starting for the engine while samples wait.
"""
from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections import deque
from dataclasses import dataclass, field, fields, replace
from typing import Optional

from ..core import defaults
from .base import Sandbox, SandboxError, SandboxSpec

log = logging.getLogger(__name__)

REMOVE_BATCH = 8  # removals in flight at once
# Starts in flight at once. The engine's work for a start is CPU-bound (~400 ms of CPU on 2 cores,
# most of it runc, the shim and the network hook): 64 started together all finish after ~13 s,
# 4 at a time hand the first samples their sandbox after ~0.5 s and the rest in a steady stream.
STARTS_IN_FLIGHT = 4


def hand_to_waiter(waiters: deque, sb: Sandbox) -> bool:
    """Give `sb` to the first of `waiters` (futures) still waiting; whether one took it."""
    while waiters:
        w = waiters.popleft()
        if not w.done():
            w.set_result(sb)
            return True
    return False


@dataclass
class PoolStats:
    started: int = 0  # sandboxes created and started by the pool
    start_failures: int = 0
    warm_hits: int = 0  # acquires served by a waiting sandbox
    waited: int = 0  # acquires that waited for one on its way
    recycled: int = 0
    recycle_failures: int = 0
    removed: int = 0
    recycle_s: list[float] = field(default_factory=list)
    acquire_s: list[float] = field(default_factory=list)

    @classmethod
    def combined(cls, many: list[PoolStats]) -> PoolStats:
        """Several pools' figures as one pool's: counts added, timings pooled."""
        out = cls()
        for stats in many:
            for f in fields(cls):
                setattr(out, f.name, getattr(out, f.name) + getattr(stats, f.name))
        return out

    def summary(self) -> dict:
        def pct(xs: list[float], q: float) -> Optional[float]:
            if not xs:
                return None
            xs = sorted(xs)
            return round(xs[min(len(xs) - 1, int(q * len(xs)))], 4)

        return {"started": self.started, "start_failures": self.start_failures, "warm_hits": self.warm_hits,
                "waited": self.waited, "recycled": self.recycled, "recycle_failures": self.recycle_failures,
                "removed": self.removed, "acquire_p50_s": pct(self.acquire_s, 0.5),
                "acquire_p95_s": pct(self.acquire_s, 0.95), "recycle_p50_s": pct(self.recycle_s, 0.5),
                "recycle_mean_s": round(statistics.fmean(self.recycle_s), 4) if self.recycle_s else None}


class SandboxPool:
    def __init__(self, spec: SandboxSpec, backend: str = defaults.BACKEND, *,
                 size: int = defaults.pool_size(defaults.CONCURRENCY), recycle: bool = True,
                 max_uses: int = defaults.POOL_MAX_USES, starts_in_flight: int = STARTS_IN_FLIGHT,
                 prestart: bool = True):
        from . import backend_class

        self.cls = backend_class(backend)
        recycle = recycle and self.cls.capabilities.recycle  # a backend that cannot: fresh sandboxes, pre-started
        self.spec = replace(spec, recyclable=recycle)
        self.size = max(size, 0)  # most sandboxes kept waiting or started ahead
        self.recycle = recycle
        self.max_uses = max_uses
        self.prestart = prestart  # start sandboxes ahead of the samples (False: only when one asks)
        self.stats = PoolStats()
        self._warm: deque[Sandbox] = deque()
        self._waiters: deque[asyncio.Future] = deque()
        self._coming = 0  # being started or recycled: each ends up in _warm (or a failure for a waiter)
        self._in_use = 0  # handed out and not released yet
        self._expected: Optional[int] = None  # samples still to ask; None: unknown
        self._tasks: set[asyncio.Task] = set()
        self._removals: asyncio.Queue = asyncio.Queue()
        self._remover: Optional[asyncio.Task] = None
        self._closed = False
        self._start_slots = asyncio.Semaphore(max(starts_in_flight, 1))
        self._unremoved: list[Sandbox] = []  # removals that failed (the engine away): tried again at close

    # ------------------------------------------------------------------ samples' side
    async def acquire(self) -> Sandbox:
        """A started sandbox, as good as new. Raises what starting one raised (SandboxError...)."""
        if self._closed:
            raise SandboxError("the sandbox pool is closed")
        t0 = time.perf_counter()
        if self._expected is not None:
            self._expected = max(self._expected - 1, 0)
        while self._warm and not self._warm[0].alive:
            self._remove(self._warm.popleft())  # died while waiting (an engine restart): never hand it out
        if self._warm:
            sb = self._warm.popleft()
            self.stats.warm_hits += 1
        else:
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            self.stats.waited += 1
            self._top_up()
            try:
                sb = await fut
            except asyncio.CancelledError:
                if fut in self._waiters:
                    self._waiters.remove(fut)
                elif fut.done() and not fut.cancelled() and fut.exception() is None:
                    self._offer(fut.result())  # handed over just as we were cancelled: keep it
                raise
        self._in_use += 1
        self.stats.acquire_s.append(time.perf_counter() - t0)
        self._top_up()
        return sb

    def release(self, sandbox: Sandbox, reusable: bool = True) -> None:
        """The sample is done with it: recycle it for the next one, or remove it. Returns at once."""
        self._in_use = max(self._in_use - 1, 0)
        # recycling is cheaper than any start: keep it whenever a sample may still want one
        future = self.size if self._expected is None else self._expected
        keep = (reusable and self.recycle and not self._closed and sandbox.recyclable
                and sandbox.uses < self.max_uses and len(self._waiters) + future > len(self._warm))
        if keep:
            self._coming += 1
            self._spawn(self._recycle_one(sandbox))
        else:
            self._remove(sandbox)
            self._top_up()

    def expect(self, remaining: int) -> None:
        """How many samples are still to ask for a sandbox (pre-starting never goes beyond it)."""
        self._expected = max(remaining, 0)
        self._top_up()

    # ------------------------------------------------------------------ the pool's side
    def _needed(self) -> int:
        """Sandboxes the samples waiting and still to come could use, beyond those on hand."""
        future = self.size if self._expected is None else self._expected
        return len(self._waiters) + future - len(self._warm) - self._coming

    def _top_up(self) -> None:
        """Start what is needed, within `size` sandboxes alive; remove waiting ones nobody will ask for."""
        if self._closed:
            return
        room = self.size - (self._in_use + len(self._warm) + self._coming)
        if room <= 0 and self._waiters and self._coming == 0 and self._in_use == 0:
            room = 1  # never leave a sample waiting with nothing on its way
        uncovered = len(self._waiters) - len(self._warm) - self._coming
        # while samples wait for a start, start only theirs: extras would slow the engine for them
        wanted = uncovered if uncovered > 0 else self._needed() if self.prestart and not self._waiters else 0
        for _ in range(max(min(wanted, room), 0)):
            self._coming += 1  # counted now: the start itself runs later
            self._spawn(self._start_one())
        while self._expected is not None and len(self._warm) > self._expected:
            self._remove(self._warm.pop())

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start_one(self) -> None:
        try:
            sb = self.cls(self.spec)  # a spec the backend cannot have is refused here (SetupError)
            async with self._start_slots:
                await sb.start()
        except BaseException as e:
            self._coming -= 1
            self.stats.start_failures += 1
            if self._waiters:  # the sample waiting for it learns why (its own retries apply)
                w = self._waiters.popleft()
                if not w.done():
                    w.set_exception(e if isinstance(e, Exception) else SandboxError(str(e)))
            elif not isinstance(e, Exception):
                raise
            else:
                log.warning("the pool could not start a sandbox: %s", e)
            return
        self._coming -= 1
        self.stats.started += 1
        self._offer(sb)

    async def _recycle_one(self, sb: Sandbox) -> None:
        try:
            done = await sb.recycle()
        except Exception as e:
            self._coming -= 1
            self.stats.recycle_failures += 1
            log.info("sandbox not recycled, removing it: %s", e)
            self._remove(sb)
            self._top_up()
            return
        self._coming -= 1
        self.stats.recycled += 1
        self.stats.recycle_s.append(done.get("seconds", 0.0))
        self._offer(sb)

    def _offer(self, sb: Sandbox) -> None:
        """A ready sandbox: to the first waiting sample, else to the warm list (or away if unwanted)."""
        if hand_to_waiter(self._waiters, sb):
            return
        if self._closed or (self._expected is not None and len(self._warm) >= self._expected):
            self._remove(sb)
        else:
            self._warm.append(sb)

    # ------------------------------------------------------------------ removal
    def _remove(self, sb: Sandbox) -> None:
        self._removals.put_nowait(sb)
        if self._remover is None or self._remover.done():
            self._remover = asyncio.ensure_future(self._remove_all())

    async def _remove_all(self) -> None:
        while not self._removals.empty():
            batch = [self._removals.get_nowait() for _ in range(min(REMOVE_BATCH, self._removals.qsize()))]
            results = await asyncio.gather(*(sb.close() for sb in batch), return_exceptions=True)
            for sb, r in zip(batch, results):
                if isinstance(r, BaseException):
                    log.info("could not remove sandbox %s (tried again at close): %s", getattr(sb, "name", sb), r)
                    self._unremoved.append(sb)
                else:
                    self.stats.removed += 1

    async def close(self, engine_wait_s: float = defaults.ENGINE_WAIT_S) -> None:
        """Remove every sandbox of the pool (waiting, being recycled or started); safe to call twice.
        Removals that failed because the engine was away are tried again once it answers (waiting at
        most engine_wait_s); what still fails is left for `insandbox clean`, and raised."""
        self._closed = True
        for w in self._waiters:
            if not w.done():
                w.set_exception(SandboxError("the sandbox pool is closed"))
        self._waiters.clear()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        while self._warm:
            self._remove(self._warm.popleft())
        while self._remover is not None and not self._remover.done():
            await asyncio.shield(self._remover)
        if not self._removals.empty():
            await self._remove_all()
        deadline, delay = time.monotonic() + engine_wait_s, 0.5
        while self._unremoved:
            if await self.cls.reachable():
                retry, self._unremoved = self._unremoved, []
                for sb in retry:
                    self._removals.put_nowait(sb)
                await self._remove_all()
                if not self._unremoved:
                    break
            if time.monotonic() >= deadline:
                names = ", ".join(getattr(sb, "name", "?") for sb in self._unremoved)
                raise SandboxError(f"could not remove {len(self._unremoved)} pooled sandbox(es): {names}; "
                                   "`insandbox clean` removes them")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def __aenter__(self) -> SandboxPool:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
