"""`insandbox pool serve`: a process that keeps sandboxes of one configuration started and hands them out.

It holds `size` sandboxes ready (a few starting at a time, as the pool does: the engine's CPU sets the
pace), hands each to one client at a time (a lease), and starts another in its place. Whatever a
client does with its sandbox goes through here (client.py sends each operation, this process runs it
on the sandbox it holds), so every check the host makes (timeouts, the reset, who killed a container)
is made by this process, from outside the sandbox, as in a run that starts its own. What a client
gives back is removed; with `recycle` it is reset first (the host-verified reset, sandbox/resetcheck.py)
and offered again, or removed when the reset is refused. A lease not renewed for LEASE_TTL_S (its
client died) is ended the same way. Claims are served in the order they came, whoever sent them.

Health: every HEALTH_EVERY_S the ready sandboxes are asked whether they are alive; a dead one is
removed (counted as failed) and replaced. Ctrl-C or SIGTERM: every sandbox removed. A SIGKILLed
service's sandboxes carry its owner label: `insandbox clean` removes them.
"""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import secrets
import time
from collections import deque
from typing import Any, Optional

from ..base import Sandbox, SandboxError, SandboxSpec
from ..pool import hand_to_waiter
from . import protocol

log = logging.getLogger(__name__)

STARTS_IN_FLIGHT = 4
HEALTH_EVERY_S = 10.0
# what a client may ask of its sandbox (each a Sandbox method): nothing else is reachable
OPS = ("run", "exec", "stat", "resolve", "read_file", "write_file", "remove_file", "info")


@dataclasses.dataclass
class Lease:
    id: str
    sandbox: Sandbox
    client: str
    renewed: float = dataclasses.field(default_factory=time.monotonic)


class Sandboxes:
    """The service's sandboxes: ready ones, leased ones, those starting; counts of failures."""

    def __init__(self, spec: SandboxSpec, backend: str, size: int, recycle: bool = False, max_uses: int = 50):
        from .. import create_sandbox  # noqa: F401  (the registry: fails here on an unknown backend)

        self.spec = dataclasses.replace(spec, recyclable=recycle)
        self.backend, self.size, self.recycle, self.max_uses = backend, size, recycle, max_uses
        self.config = protocol.config_of(spec, backend)
        self.ready: deque[Sandbox] = deque()
        self.leases: dict[str, Lease] = {}
        self.starting = 0
        self.failed = 0  # starts that failed, and ready sandboxes found dead
        self.handed_out = 0  # in all, since the start
        self.last_error: Optional[str] = None
        self._waiters: deque[asyncio.Future] = deque()
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task] = set()
        self._closing = False
        self._loops: list[asyncio.Task] = []

    # ------------------------------------------------------------------ life
    def open(self) -> None:
        self._loops = [asyncio.ensure_future(self._watch())]
        self._top_up()

    async def close(self) -> None:
        self._closing = True
        for t in self._loops:
            t.cancel()
        for w in self._waiters:
            if not w.done():
                w.set_exception(SandboxError("the sandbox service is stopping"))
        everything = list(self.ready) + [lease.sandbox for lease in self.leases.values()]
        self.ready.clear()
        self.leases.clear()
        await asyncio.gather(*(self._close(sb) for sb in everything), return_exceptions=True)
        while self._tasks:  # starts under way end with their sandbox removed (closing)
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def status(self) -> dict[str, Any]:
        return {"ready": len(self.ready), "handed_out": len(self.leases), "starting": self.starting,
                "failed": self.failed, "size": self.size, "served": self.handed_out, "recycle": self.recycle,
                "config": self.config, "last_error": self.last_error, "waiting_clients": len(self._waiters)}

    # ------------------------------------------------------------------ leases
    async def claim(self, client: str) -> Lease:
        """A ready sandbox for `client` (waiting in line for one when none is ready)."""
        if self._closing:
            raise SandboxError("the sandbox service is stopping")
        if self.ready and not self._waiters:
            sb = self.ready.popleft()
        else:
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            self._top_up()
            try:
                sb = await fut
            finally:
                if fut in self._waiters:
                    self._waiters.remove(fut)
        # unguessable: a client reaches no other client's sandbox by guessing its lease
        lease = Lease(f"L{next(self._ids)}-{secrets.token_urlsafe(12)}", sb, client)
        self.leases[lease.id] = lease
        self.handed_out += 1
        self._top_up()
        return lease

    def renew(self, ids: list[str]) -> list[str]:
        """Renew these leases; the ones that are not held any more (expired, released)."""
        now, gone = time.monotonic(), []
        for i in ids:
            lease = self.leases.get(i)
            if lease is None:
                gone.append(i)
            else:
                lease.renewed = now
        return gone

    def lease(self, lease_id: str) -> Lease:
        lease = self.leases.get(lease_id)
        if lease is None:
            raise KeyError(lease_id)
        lease.renewed = time.monotonic()
        return lease

    def release(self, lease_id: str) -> None:
        lease = self.leases.pop(lease_id, None)
        if lease is not None:
            self._spawn(self._give_back(lease.sandbox))

    # ------------------------------------------------------------------ inside
    def _top_up(self) -> None:
        if self._closing:
            return
        want = self.size + len(self._waiters) - len(self.ready) - self.starting
        for _ in range(max(0, min(want, STARTS_IN_FLIGHT - self.starting))):
            self.starting += 1
            self._spawn(self._start_one())

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start_one(self) -> None:
        from .. import create_sandbox

        sb = create_sandbox(self.spec, self.backend)
        try:
            await sb.start()
        except Exception as e:  # counted; the next top-up tries again
            self.failed += 1
            self.last_error = f"{type(e).__name__}: {e}"
            log.warning("a sandbox did not start: %s", e)
            await self._close(sb)
            await asyncio.sleep(1.0)  # an engine that refuses every start is not hammered
            return
        finally:
            self.starting -= 1
        if self._closing:
            await self._close(sb)
            return
        self._offer(sb)
        self._top_up()

    def _offer(self, sb: Sandbox) -> None:
        if not hand_to_waiter(self._waiters, sb):
            self.ready.append(sb)

    async def _give_back(self, sb: Sandbox) -> None:
        if self.recycle and not self._closing and sb.uses + 1 < self.max_uses and sb.capabilities.recycle:
            try:
                await sb.recycle()
            except SandboxError as e:  # refused by the host's check, or failed: never reused
                log.info("not reused: %s", e)
            else:
                self._offer(sb)
                return
        await self._close(sb)
        self._top_up()

    async def _close(self, sb: Sandbox) -> None:
        try:
            await sb.close()
        except Exception as e:
            log.warning("could not remove a sandbox (insandbox clean will): %s", e)

    async def _watch(self) -> None:
        """Expired leases ended; dead ready sandboxes replaced."""
        while True:
            await asyncio.sleep(min(HEALTH_EVERY_S, protocol.LEASE_TTL_S / 4))
            try:
                self._look()
            except Exception:  # one bad look must not end the watching
                log.exception("the service's watch failed once")

    def _look(self) -> None:
        now = time.monotonic()
        for lease in [le for le in self.leases.values() if now - le.renewed > protocol.LEASE_TTL_S]:
            log.warning("lease %s of %s expired: its sandbox is removed", lease.id, lease.client)
            self.leases.pop(lease.id, None)
            self._spawn(self._close_and_top_up(lease.sandbox))
        for sb in list(self.ready):
            if not sb.alive:
                self.ready.remove(sb)
                self.failed += 1
                self.last_error = f"a ready sandbox died ({sb.info().get('name', '?')})"
                self._spawn(self._close_and_top_up(sb))

    async def _close_and_top_up(self, sb: Sandbox) -> None:
        await self._close(sb)
        self._top_up()


async def call(sandboxes: Sandboxes, lease_id: str, op: str, args: dict) -> Any:
    """One operation of a lease's sandbox; its result (encoded for the wire)."""
    if op not in OPS:
        raise ValueError(f"unknown operation {op!r}")
    sb = sandboxes.lease(lease_id).sandbox
    args = {k: protocol.decode(v) for k, v in args.items()}
    result = getattr(sb, op)(**args)
    if asyncio.iscoroutine(result):
        result = await result
    return protocol.encode(result)
