"""A command's side of the sandbox service: `ServedPool` takes sandboxes from it as `SandboxPool` would
start them, and each is a `ServedSandbox` whose operations run in the service (service.py), which holds
the sandbox and makes every host check. What the client gives back the service removes (or resets,
with its --recycle); its leases are renewed while it lives, so a client that dies leaks nothing.
"""
from __future__ import annotations

import asyncio
import dataclasses
import os
import socket as _socket
import time
from typing import Any, Optional

from ...core import defaults
from .. import base
from ..base import Capabilities, CommandResult, ExecResult, Sandbox, SandboxError, SandboxSpec, SetupError
from ..pool import PoolStats
from . import protocol

# the classes of the service's errors a client raises as they are (the rest: SandboxError)
ERRORS = {cls.__name__: cls for cls in (base.SandboxError, base.SandboxBrokenByItself, base.OperationError,
                                        base.SandboxFileError, base.SetupError)}


class ServiceClient:
    """HTTP to a sandbox service (aiohttp, on a unix socket or loopback TCP, with the token)."""

    def __init__(self, url: str):
        self.url = url
        self.socket, host, port = protocol.parse_url(url)
        self.base = "http://pool" if self.socket else f"http://{host}:{port}"
        self.token = protocol.token_for(url)
        self._session = None

    async def _http(self):
        import aiohttp

        if self._session is None or self._session.closed:
            connector = aiohttp.UnixConnector(path=str(self.socket)) if self.socket else aiohttp.TCPConnector(limit=0)
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
            self._session = aiohttp.ClientSession(connector=connector, headers=headers,
                                                  timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        return self._session

    async def request(self, method: str, path: str, body: Optional[dict] = None) -> tuple[int, dict]:
        import aiohttp

        try:
            http = await self._http()
            async with http.request(method, self.base + protocol.API + path, json=body) as r:
                return r.status, await r.json(content_type=None)
        except (aiohttp.ClientError, OSError, ValueError) as e:
            raise SandboxError(f"the sandbox service at {self.url} did not answer: {e}") from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def raise_error(error: dict, url: str) -> None:
    cls = ERRORS.get(str(error.get("type")), SandboxError)
    message = str(error.get("message") or "the sandbox service failed")
    if error.get("type") == "Unauthorized":
        raise SetupError(f"the sandbox service at {url} refused this command's token ({message}); is the token "
                         f"file {url} wrote still there?")
    raise cls(message)


class ServedSandbox(Sandbox):
    """A sandbox held by the service; every operation is a request to it."""

    backend = "served"
    # what the service's own backend holds is checked there; here nothing is refused twice
    capabilities = Capabilities(disk_limit=True, network_modes=("bridge", "none", "host", "registries"),
                                named_networks=True, limits=("memory", "cpus", "pids"), runtimes=True)

    def __init__(self, spec: SandboxSpec, pool: ServedPool, lease: str, info: dict):
        super().__init__(spec)
        self.pool, self.lease, self._info = pool, lease, dict(info, served_by=pool.url)
        self._alive = True
        self.name = str(info.get("name") or lease)

    async def _call(self, op: str, **args: Any) -> Any:
        wire = {k: protocol.encode(v) for k, v in args.items()}
        status, data = await self.pool.client.request("POST", f"/leases/{self.lease}/call", {"op": op, "args": wire})
        if "error" in data:
            if status == 404 or data["error"].get("type") in ("SandboxError", "SandboxBrokenByItself"):
                self._alive = False
            raise_error(data["error"], self.pool.url)
        return protocol.decode(data.get("result"))

    async def start(self) -> None:
        """Started by the service before it was handed out."""

    async def close(self) -> None:
        self._alive = False
        await self.pool.give_back(self)

    @property
    def alive(self) -> bool:
        return self._alive

    async def run(self, command: str, timeout: float = defaults.COMMAND_TIMEOUT_S) -> CommandResult:
        return await self._call("run", command=command, timeout=timeout)

    async def exec(self, argv: list[str], timeout: float = 60.0, stdin: str = "") -> ExecResult:
        return await self._call("exec", argv=list(argv), timeout=timeout, stdin=stdin)

    async def stat(self, path: str):
        return await self._call("stat", path=path)

    async def resolve(self, path: str):
        real, st = await self._call("resolve", path=path)
        return real, st

    async def read_file(self, path: str, max_bytes: Optional[int] = None) -> bytes:
        return await self._call("read_file", path=path, max_bytes=max_bytes)

    async def write_file(self, path: str, data: bytes, mode: Optional[int] = None) -> None:
        await self._call("write_file", path=path, data=data, mode=mode)

    async def remove_file(self, path: str) -> None:
        await self._call("remove_file", path=path)

    def info(self) -> dict:
        return dict(self._info)


@dataclasses.dataclass
class ServedStats(PoolStats):
    served_by: str = ""

    def summary(self) -> dict:
        return {**super().summary(), "served_by": self.served_by, "claims": self.warm_hits}


class ServedPool:
    """SandboxPool's interface over a sandbox service: acquire() claims a ready sandbox, release() gives it
    back (the service removes it, or resets it with --recycle); expect() and the start-ahead are the
    service's business. The service must hold sandboxes of `spec`'s configuration: `check()` says in one
    line where they differ."""

    def __init__(self, url: str, spec: SandboxSpec, backend: str):
        self.url, self.spec, self.backend = url, spec, backend
        self.client = ServiceClient(url)
        self.config = protocol.config_of(spec, backend)
        self.me = f"{_socket.gethostname()}:{os.getpid()}"
        self._held: dict[str, ServedSandbox] = {}
        self._renewer: Optional[asyncio.Task] = None
        self.claims, self.claim_s = 0, []  # what acquiring cost

    async def check(self) -> dict:
        """The service's status; SetupError naming the first difference of configuration."""
        status, data = await self.client.request("GET", "/status")
        if "error" in data:
            raise_error(data["error"], self.url)
        why = protocol.difference(data.get("config") or {}, self.config)
        if why:
            raise SetupError(f"the sandbox service at {self.url} holds other sandboxes than this command asks for: "
                             f"{why}")
        return data

    async def acquire(self) -> ServedSandbox:
        t0 = time.perf_counter()
        status, data = await self.client.request("POST", "/claim", {"client": self.me, "config": self.config})
        if "error" in data:
            raise_error(data["error"], self.url)
        sb = ServedSandbox(self.spec, self, data["lease"], data.get("info") or {})
        self._held[sb.lease] = sb
        self.claims += 1
        self.claim_s.append(time.perf_counter() - t0)
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.ensure_future(self._renew())
        return sb

    def release(self, sandbox: Sandbox, reusable: bool = True) -> None:
        if isinstance(sandbox, ServedSandbox):
            asyncio.ensure_future(self.give_back(sandbox))

    def expect(self, remaining: int) -> None:
        """The service keeps its own number ready."""

    async def give_back(self, sb: ServedSandbox) -> None:
        if self._held.pop(sb.lease, None) is None:
            return
        sb._alive = False
        try:
            await self.client.request("POST", f"/leases/{sb.lease}/release")
        except SandboxError:
            pass  # the service gone: its sandboxes went with it (or `insandbox clean` finds them)

    async def close(self, engine_wait_s: float = 0.0) -> None:
        await asyncio.gather(*(self.give_back(sb) for sb in list(self._held.values())), return_exceptions=True)
        if self._renewer is not None:
            self._renewer.cancel()
        await self.client.close()

    @property
    def stats(self) -> ServedStats:
        """What acquiring cost, as a pool's figures (picklable: worker processes send them back)."""
        return ServedStats(warm_hits=self.claims, acquire_s=list(self.claim_s), served_by=self.url)

    async def _renew(self) -> None:
        while self._held:
            await asyncio.sleep(protocol.RENEW_EVERY_S)
            try:
                _, data = await self.client.request("POST", "/renew", {"leases": list(self._held)})
            except SandboxError:
                continue
            for gone in data.get("gone") or []:
                sb = self._held.pop(gone, None)
                if sb is not None:
                    sb._alive = False
