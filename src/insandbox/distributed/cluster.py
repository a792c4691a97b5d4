"""A Ray cluster as a set of sandbox nodes: the connection, and one async worker actor per node.

Ray places each worker on its node (a hard node affinity), runs many of its calls at once (an
async actor: one process, one event loop, one model client per node) and tells us when a node is
lost. Each call goes to the worker with the least work in flight for its size; a call whose node
(or worker process) is lost runs again on another node, and the loss is listed with its result.

Nodes that offer the custom resource `insandbox` (`ray start --resources '{"insandbox": 16}'`) are
the only ones used when there are any, the amount being the node's share of the work; otherwise
every alive node is used, sized by its CPUs. Nodes that join during a run get a worker at the
next look at the cluster (every REFRESH_S, and whenever no worker is left).
"""
from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from ..config import ConfigError
from ..core.errors import InsandboxError

SANDBOX_RESOURCE = "insandbox"
MAX_LOST_PER_CALL = 3  # nodes one call may lose before the run stops: something larger is wrong
MAX_RESTARTS_PER_NODE = 2  # a worker that keeps dying on a node that lives is a fault of the worker
REFRESH_S = 30.0
LOST_NODE_QUIET_S = 60.0  # Ray may list a dead node as alive until its heartbeats are missed: no new worker there


class NoNodesLeft(InsandboxError, RuntimeError):
    """No node of the cluster can take the work."""


def ray_module():
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs Ray on this machine and on every node: pip install 'insandbox[ray]'") from None
    return ray


def connect(address: str) -> bool:
    """Join the cluster at `address` ("auto": the one `ray start` started on this machine). True if
    this call connected (the caller disconnects at the end), False if this process already was."""
    ray = ray_module()
    if ray.is_initialized():
        return False
    _check_reachable(address)
    try:  # the workers' log lines stay on their nodes (in Ray's session logs), not in our progress display
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as e:
        why = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"--ray {address}: cannot join a Ray cluster there ({why}); start one with "
                          "`ray start --head` (see docs/backends/ray.md ('Many machines (Ray)'))") from None
    return True


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A host:port that nothing answers on fails here at once (Ray itself keeps trying for minutes)."""
    if address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--ray {address}: give auto or the head node's HOST:PORT (e.g. 10.0.0.5:6379)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ConfigError(f"--ray {address}: no Ray cluster answers there ({e.strerror or e}); start one with "
                          "`ray start --head` (see docs/backends/ray.md ('Many machines (Ray)'))") from None


def disconnect() -> None:
    ray_module().shutdown()


def lost_node_errors() -> tuple[type[BaseException], ...]:
    """What Ray raises for a call whose node, worker process or result went away."""
    from ray import exceptions as rx

    return (rx.RayActorError, rx.WorkerCrashedError, rx.NodeDiedError, rx.ObjectLostError)


def sandbox_nodes() -> list[dict]:
    """The alive nodes that take sandboxes: those offering `insandbox` if any do, else all."""
    alive = [n for n in ray_module().nodes() if n.get("Alive")]
    marked = [n for n in alive if n.get("Resources", {}).get(SANDBOX_RESOURCE)]
    return marked or alive


def _weight(node: dict) -> float:
    res = node.get("Resources", {})
    return float(res.get(SANDBOX_RESOURCE) or res.get("CPU") or 1.0)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


@dataclass
class Node:
    id: str
    address: str
    weight: float
    actor: Any = None  # its worker; None while it has none
    in_flight: int = 0
    restarts: int = 0
    last_error: str = ""
    lost_at: float = float("-inf")  # monotonic time its worker was last lost


class NodePool:
    """One `worker_cls(*args)` actor on each sandbox node; `call` runs a method on the least busy."""

    def __init__(self, worker_cls: type, args: tuple, max_concurrency: int,
                 on_status: Callable[[str], None] = lambda text: None):
        ray = ray_module()
        self._remote = ray.remote(worker_cls)
        self._args = args
        self._max_concurrency = max_concurrency
        self.on_status = on_status
        self.nodes: dict[str, Node] = {}
        self.lost: list[dict] = []  # every node lost during the run: when, which, why
        self._next_refresh = 0.0
        self.refresh()

    # ------------------------------------------------------------------ the nodes
    def refresh(self) -> None:
        """Start a worker on each alive node without one: a node that joined, or one whose worker
        died while the node lives on (at most MAX_RESTARTS_PER_NODE times)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._next_refresh = time.monotonic() + REFRESH_S
        alive = {n["NodeID"]: n for n in sandbox_nodes()}
        for nid, node in self.nodes.items():
            if nid not in alive:
                node.actor = None
        for nid, info in alive.items():
            node = self.nodes.get(nid)
            if node is not None and node.actor is not None:
                continue
            if node is None:
                node = self.nodes[nid] = Node(nid, info.get("NodeManagerAddress", "?"), _weight(info))
            elif node.restarts >= MAX_RESTARTS_PER_NODE or time.monotonic() - node.lost_at < LOST_NODE_QUIET_S:
                continue
            else:
                node.restarts += 1
            # num_cpus=0: the worker mostly waits (on the model, on containers); it must never queue behind
            # other work for a CPU. Restarting is ours to decide (a lost node's calls go elsewhere).
            node.actor = self._remote.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False), num_cpus=0, max_restarts=0,
                max_concurrency=self._max_concurrency).remote(*self._args)

    def ready(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.actor is not None]

    def describe(self) -> str:
        return ", ".join(f"{n.address} ({n.id[:8]}, share {n.weight:g})" for n in self.ready())

    def _pick(self) -> Node:
        if time.monotonic() >= self._next_refresh or not self.ready():
            self.refresh()
        ready = self.ready()
        if not ready:
            last = "; ".join(sorted({n.last_error for n in self.nodes.values() if n.last_error}))
            raise NoNodesLeft(f"no Ray node can take samples (nodes lost: {len(self.lost)}; last: {last or '-'})")
        return min(ready, key=lambda n: ((n.in_flight + 1) / n.weight, n.in_flight))

    def _lose(self, node: Node, actor: Any, exc: BaseException) -> None:
        if node.actor is not actor:  # a call beside this one found it first
            return
        node.actor, node.last_error, node.lost_at = None, first_line(exc), time.monotonic()
        self.lost.append({"node": node.id, "address": node.address, "error": node.last_error, "at": time.time()})
        self.on_status(f"Ray node {node.address} ({node.id[:8]}) lost ({node.last_error}); its samples run again "
                       "on the other nodes")
        try:
            ray_module().kill(actor, no_restart=True)
        except Exception:
            pass

    # ------------------------------------------------------------------ the work
    async def call(self, method: str, *args: Any) -> tuple[Any, Node, list[dict]]:
        """Run `method(*args)` on a worker: its result, the node that gave it and the nodes lost
        on the way (the call ran again on another node after each). Errors raised by the method
        itself reach the caller as they are."""
        from ray.exceptions import RayTaskError

        lost: list[dict] = []
        while True:
            node = self._pick()
            actor = node.actor
            node.in_flight += 1
            try:
                return await getattr(actor, method).remote(*args), node, lost
            except RayTaskError as e:  # the method raised: its own exception, not Ray's wrapper
                cause = e.cause if isinstance(e.cause, BaseException) else None
                if cause is None:
                    raise
                raise cause from None
            except lost_node_errors() as e:
                self._lose(node, actor, e)
                lost.append({"node": node.id, "address": node.address, "error": first_line(e)})
                if len(lost) >= MAX_LOST_PER_CALL:
                    raise NoNodesLeft(f"{len(lost)} nodes lost while running one call; last: {first_line(e)}") from e
            finally:
                node.in_flight -= 1

    async def close(self, method: Optional[str] = None, timeout_s: float = 30.0) -> None:
        """Ask each worker to tidy up (`method`), then end it."""
        ray = ray_module()
        actors = [n.actor for n in self.nodes.values() if n.actor is not None]
        if method and actors:
            import asyncio

            try:
                await asyncio.wait_for(asyncio.gather(*(getattr(a, method).remote() for a in actors),
                                                      return_exceptions=True), timeout_s)
            except asyncio.TimeoutError:
                pass
        for a in actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:
                pass
        for n in self.nodes.values():
            n.actor = None
