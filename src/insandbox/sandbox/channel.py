"""Host side of the link to the in-sandbox server (guest/server.py): newline-delimited JSON requests
written to its stdin, one reply per request read from its stdout, matched by id (guest/protocol.py).

`ServerChannel` is that logic whatever carries the bytes; a backend says how they arrive:
docker/channel.py reads the engine's multiplexed attach stream, `PipeChannel` (below) the plain
stdout and stderr pipes of a process this one started (the bwrap backend).
"""
from __future__ import annotations

import asyncio
import collections
import itertools
import json
from pathlib import Path
from typing import Any, Optional

from .base import SandboxError, ServerError

STREAM_LIMIT = 64 * 1024 * 1024  # a reply line can hold a big (already clipped) output; a longer one ends the channel
_SERVER_SOURCE: Optional[str] = None


def server_source() -> str:
    """What the bootstrap (guest/protocol.py's BOOTSTRAP) reads as its first line and runs."""
    global _SERVER_SOURCE
    if _SERVER_SOURCE is None:
        guest = Path(__file__).parent / "guest"  # the protocol's names first: the server uses them
        _SERVER_SOURCE = (guest / "protocol.py").read_text() + "\n" + (guest / "server.py").read_text()
    return _SERVER_SOURCE


class ServerSilent(SandboxError):
    """The server did not answer in time, its channel still open (the backend decides whose doing)."""


class ServerChannel:
    """Requests and replies; a subclass implements `_read_replies`, handing stdout bytes to
    `_feed` and stderr bytes to `_note_stderr`, and returning at end of stream."""

    gone_reason = "the sandbox's server exited"  # said when the stream ends

    def __init__(self, writer: asyncio.StreamWriter, name: str):
        self.writer, self.name = writer, name
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future] = {}
        self.unanswered: set[int] = set()  # sent and not yet answered, waited for or not
        self.reply_limits: dict[int, int] = {}  # request id -> the most bytes its reply may take
        self.ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self.stderr = collections.deque(maxlen=50)  # last lines the server wrote to stderr
        self.closed_reason: Optional[str] = None
        self._buf = bytearray()
        self._task = asyncio.ensure_future(self._read_loop())

    async def _read_replies(self) -> None:
        raise NotImplementedError

    async def handshake(self, source: str, timeout: float = 60.0) -> dict:
        """Send the server's source to the bootstrap and wait until it says ready."""
        self.writer.write(json.dumps(source).encode() + b"\n")
        await self.writer.drain()
        try:
            return await asyncio.wait_for(asyncio.shield(self.ready), timeout)
        except asyncio.TimeoutError:
            raise SandboxError(f"sandbox {self.name} did not start its server within {timeout:.0f}s; "
                               f"stderr: {self.stderr_text()}") from None

    async def request(self, op: str, wait_s: float, *, reply_limit: Optional[int] = None, **fields: Any) -> dict:
        """Send one request; wait at most wait_s for its reply. A reply line longer than reply_limit
        bytes (STREAM_LIMIT at most) while it is the only one awaited ends the channel: the server
        was told the bound and broke it."""
        if self.closed_reason:
            raise SandboxError(f"sandbox {self.name} is gone: {self.closed_reason}")
        rid = next(self.ids)
        fut = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        self.unanswered.add(rid)
        if reply_limit is not None:
            self.reply_limits[rid] = min(reply_limit, STREAM_LIMIT)
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
            raise ServerSilent(f"sandbox {self.name} did not answer within {wait_s:.0f}s") from None
        finally:
            self.pending.pop(rid, None)
            self.reply_limits.pop(rid, None)
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

    def _note_stderr(self, data: bytes) -> None:
        self.stderr.extend(data.decode(errors="replace").splitlines())

    def _line_limit(self) -> int:
        """The most bytes the next reply line may take: a bounded request's bound while only bounded
        requests are awaited (the server answers one at a time), else STREAM_LIMIT."""
        limits = [self.reply_limits.get(rid) for rid in self.unanswered]
        return max(limits) if limits and None not in limits else STREAM_LIMIT

    def _feed(self, data: bytes) -> None:
        """Bytes of the server's stdout: every complete line is a reply. One that grows past its bound
        is refused before it is read whole (an exception here ends the channel)."""
        buf = self._buf
        start = len(buf)  # what is already buffered holds no newline
        buf += data
        while True:
            nl = buf.find(b"\n", start)
            limit = self._line_limit()
            if (nl < 0 and len(buf) > limit) or nl > limit:
                raise SandboxError(f"a reply of more than {limit:,} bytes, past the bound of what was asked")
            if nl < 0:
                break
            line = bytes(buf[:nl])
            del buf[: nl + 1]
            start = 0
            if line.strip():
                self._dispatch(json.loads(line))

    async def _read_loop(self) -> None:
        reason = self.gone_reason
        try:
            await self._read_replies()
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


class PipeChannel(ServerChannel):
    """The server's stdin, stdout and stderr are pipes of a process started here (asyncio subprocess
    streams, opened with limit=STREAM_LIMIT)."""

    def __init__(self, stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader, stderr: asyncio.StreamReader,
                 name: str):
        self.stdout, self.stderr_stream = stdout, stderr
        super().__init__(stdin, name)

    async def _read_replies(self) -> None:
        errors = asyncio.ensure_future(self._read_stderr())
        try:
            while True:
                data = await self.stdout.read(1 << 20)
                if not data:
                    return
                self._feed(data)
        finally:
            if not errors.done():  # what the sandbox said last, e.g. why it could not start
                await asyncio.wait([errors], timeout=1.0)
            errors.cancel()

    async def _read_stderr(self) -> None:
        while True:
            line = await self.stderr_stream.readline()
            if not line:
                return
            self._note_stderr(line)
