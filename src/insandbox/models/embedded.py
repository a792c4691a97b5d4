"""The embedded default model: a local_server process that lives as long as one run.

`EmbeddedClient` is an ordinary ModelClient: it starts the server process, waits
until it listens, then talks to it through OpenAIChatClient over HTTP like any other
endpoint. The server is spawned at once but awaited only by the first model call,
so loading the model overlaps the sandbox start. The child's stdin is a pipe from
us: if this process dies, the server sees EOF and exits, so no model process is
left behind even after a SIGKILL.
"""
from __future__ import annotations

import asyncio
import collections
import os
import signal
import sys
import time
from pathlib import Path
from typing import Optional

from .base import DeltaHook, ModelError, ModelReply
from .openai_compat import OpenAIChatClient

START_TIMEOUT_S = 180.0


class EmbeddedServer:
    def __init__(self, gguf: Optional[Path] = None, n_ctx: Optional[int] = None):
        self.gguf, self.n_ctx = gguf, n_ctx
        self.proc: Optional[asyncio.subprocess.Process] = None
        self.port: Optional[int] = None
        self.model_name = ""
        self.stderr_tail: collections.deque = collections.deque(maxlen=30)
        self._ready: Optional[asyncio.Future] = None
        self.spawned_at: Optional[float] = None  # unix times, for the trajectory
        self.ready_at: Optional[float] = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        """Spawn the server; `wait_ready` returns once it listens."""
        if self._ready is None:
            self._ready = asyncio.ensure_future(self._start())

    async def wait_ready(self) -> str:
        self.start()
        return await asyncio.shield(self._ready)

    async def _start(self) -> str:
        self.spawned_at = time.time()
        cmd = [sys.executable, "-m", "insandbox.models.local_server", "--port", "0", "--watch-stdin"]
        if self.gguf:
            cmd += ["--gguf", str(self.gguf)]
        if self.n_ctx:
            cmd += ["--n-ctx", str(self.n_ctx)]
        self.proc = await asyncio.create_subprocess_exec(
            *cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        stderr_task = asyncio.ensure_future(self._drain_stderr())
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), START_TIMEOUT_S)
        except asyncio.TimeoutError:
            await self.stop()
            raise ModelError(f"the embedded model server did not start within {START_TIMEOUT_S:.0f}s") from None
        if not line.startswith(b"listening on "):
            await self.proc.wait()
            await stderr_task
            raise ModelError("the embedded model server failed to start: " + " | ".join(self.stderr_tail))
        fields = dict(f.split("=", 1) for f in line.decode().split()[3:] if "=" in f)
        self.port, self.model_name = int(line.split()[2]), fields.get("model", "local")
        self.ready_at = time.time()
        return self.url

    def info(self) -> dict:
        return {"gguf": str(self.gguf or "default"), "url": self.url if self.port else None,
                "spawned_at": self.spawned_at, "ready_at": self.ready_at}

    async def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        async for line in self.proc.stderr:
            text = line.decode(errors="replace").rstrip()
            if text:
                self.stderr_tail.append(text)

    async def stop(self) -> None:
        """Stop the process and wait for it: the port is free when this returns."""
        if self._ready is not None and not self._ready.done():
            self._ready.cancel()
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                break
            try:
                await asyncio.wait_for(proc.wait(), grace)
                break
            except asyncio.TimeoutError:
                continue


class EmbeddedClient:
    """A ModelClient for the embedded model: same HTTP path as any other server (a ConfiguredClient whose
    `server` is the one it started)."""

    def __init__(self, gguf: Optional[Path] = None, n_ctx: Optional[int] = None, **client_kwargs):
        self.server: EmbeddedServer = EmbeddedServer(gguf, n_ctx)
        self.client_kwargs = client_kwargs
        self.inner: Optional[OpenAIChatClient] = None
        self.on_delta: Optional[DeltaHook] = None  # handed to the inner client (streaming)
        self.name = Path(gguf).stem if gguf else "SmolLM2-135M-Instruct.Q4_1"
        self.server.start()

    @property
    def base_url(self) -> Optional[str]:
        return self.server.url if self.server.port else None

    async def complete(self, messages: list[dict], tools: Optional[list[dict]] = None) -> ModelReply:
        if self.inner is None:
            url = await self.server.wait_ready()
            self.name = self.server.model_name or self.name
            self.inner = OpenAIChatClient(self.name, base_url=url, **self.client_kwargs)
        self.inner.on_delta = self.on_delta
        return await self.inner.complete(messages, tools)

    async def close(self) -> None:
        if self.inner is not None:
            await self.inner.close()
        await self.server.stop()
