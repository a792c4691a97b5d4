"""Host side of the link to the in-container server: one long-lived attach stream.

We open the container's attach endpoint ourselves on an asyncio connection and
upgrade it to a raw stream, so every request is a write and a read on one socket:
about a millisecond a command, against ~100 ms for a `docker exec`. The engine frames
the container's stdout and stderr (8-byte header: stream id, 3 zero bytes, length);
stdout carries the server's JSON replies, stderr only diagnostics.
"""
from __future__ import annotations

import asyncio
import collections
import itertools
import json
import struct
from typing import Any, Optional
from urllib.parse import urlparse

from ..base import SandboxError, ServerError

STREAM_LIMIT = 64 * 1024 * 1024  # a reply line can hold a big (already clipped) output


class Channel:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, name: str):
        self.reader, self.writer, self.name = reader, writer, name
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future] = {}
        self.unanswered: set[int] = set()  # sent and not yet answered, waited for or not
        self.ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self.stderr = collections.deque(maxlen=50)  # last lines the server wrote to stderr
        self.closed_reason: Optional[str] = None
        self._task = asyncio.ensure_future(self._read_loop())

    @classmethod
    async def attach(cls, docker_host: str, api_version: str, container_id: str, name: str = "") -> Channel:
        """Open the attach stream; call before starting the container so no output is lost."""
        url = urlparse(docker_host)
        try:
            if url.scheme in ("unix", ""):
                reader, writer = await asyncio.open_unix_connection(url.path or docker_host, limit=STREAM_LIMIT)
            elif url.scheme in ("tcp", "http"):
                reader, writer = await asyncio.open_connection(url.hostname, url.port or 2375, limit=STREAM_LIMIT)
            else:
                raise SandboxError(f"DOCKER_HOST {docker_host!r}: only unix:// and tcp:// engines are supported")
        except OSError as e:
            raise SandboxError(f"cannot connect to the Docker engine at {docker_host}: {e}") from e
        request = (f"POST /v{api_version}/containers/{container_id}/attach?stream=1&stdin=1&stdout=1&stderr=1 "
                   "HTTP/1.1\r\nHost: docker\r\nConnection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: 0\r\n\r\n")
        writer.write(request.encode())
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0].decode(errors="replace")
        code = status.split()[1] if len(status.split()) > 1 else ""
        if code not in ("101", "200"):
            body = await reader.read(2000)
            writer.close()
            raise SandboxError(f"attach to container {container_id[:12]} failed: {status} "
                               f"{body.decode(errors='replace')}")
        return cls(reader, writer, name or container_id[:12])

    async def handshake(self, source: str, timeout: float = 60.0) -> dict:
        """Send the server's source to the bootstrap and wait until it says ready."""
        self.writer.write(json.dumps(source).encode() + b"\n")
        await self.writer.drain()
        try:
            return await asyncio.wait_for(asyncio.shield(self.ready), timeout)
        except asyncio.TimeoutError:
            raise SandboxError(f"sandbox {self.name} did not start its server within {timeout:.0f}s; "
                               f"stderr: {self.stderr_text()}") from None

    async def request(self, op: str, wait_s: float, **fields: Any) -> dict:
        """Send one request; wait at most wait_s for its reply."""
        if self.closed_reason:
            raise SandboxError(f"sandbox {self.name} is gone: {self.closed_reason}")
        rid = next(self.ids)
        fut = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        self.unanswered.add(rid)
        try:
            self.writer.write(json.dumps({"id": rid, "op": op, **fields}).encode() + b"\n")
            await self.writer.drain()
            reply = await asyncio.wait_for(fut, wait_s)
        except (ConnectionError, OSError) as e:
            # the write may hear of the lost connection before the reader does (Podman drops it at once
            # when the container dies): let the reader finish, so the error says why
            await asyncio.wait([self._task], timeout=1.0)
            if self.closed_reason:
                raise SandboxError(f"sandbox {self.name} is gone: {self.closed_reason}") from e
            raise SandboxError(f"sandbox {self.name}: channel broke: {e}") from e
        except asyncio.TimeoutError:
            raise SandboxError(f"sandbox {self.name} did not answer within {wait_s:.0f}s") from None
        finally:
            self.pending.pop(rid, None)
            if not fut.done():
                fut.cancel()
            elif not fut.cancelled():
                fut.exception()  # the reader failed it after this request gave up: retrieved here
        if not reply.get("ok"):
            raise ServerError(self.name, str(reply.get("error")))
        return reply

    @property
    def busy(self) -> bool:
        """The server is still working on an earlier request (e.g. a command whose caller gave
        up): it answers one request at a time, so a new one would wait behind it."""
        return bool(self.unanswered)

    def stderr_text(self) -> str:
        return " | ".join(self.stderr) or "(none)"

    async def _read_loop(self) -> None:
        buf = bytearray()
        reason = "the container's server exited"
        try:
            while True:
                header = await self.reader.readexactly(8)
                stream, size = header[0], struct.unpack(">I", header[4:])[0]
                data = await self.reader.readexactly(size)
                if stream == 2:
                    self.stderr.extend(data.decode(errors="replace").splitlines())
                    continue
                buf += data
                while True:
                    nl = buf.find(b"\n")
                    if nl < 0:
                        break
                    line = bytes(buf[:nl])
                    del buf[: nl + 1]
                    if line.strip():
                        self._dispatch(json.loads(line))
        except asyncio.IncompleteReadError:
            pass
        except asyncio.CancelledError:
            reason = "the channel was closed"
            raise
        except Exception as e:  # a corrupt frame or reply: the channel is unusable
            reason = f"channel error: {type(e).__name__}: {e}"
        finally:
            self.closed_reason = reason
            err = SandboxError(f"sandbox {self.name} is gone: {reason}; stderr: {self.stderr_text()}")
            for fut in list(self.pending.values()) + [self.ready]:
                if not fut.done():
                    fut.set_exception(err)
            if self.ready.done() and not self.ready.cancelled():
                self.ready.exception()  # mark retrieved: nobody may be waiting any more

    def _dispatch(self, msg: dict) -> None:
        if msg.get("ready"):
            if not self.ready.done():
                self.ready.set_result(msg)
            return
        self.unanswered.discard(msg.get("id"))
        fut = self.pending.get(msg.get("id"))
        if fut is not None and not fut.done():
            fut.set_result(msg)

    async def close(self) -> None:
        self._task.cancel()
        try:
            self.writer.close()
        except Exception:
            pass
        try:
            await self._task
        except (asyncio.CancelledError, Exception):
            pass
