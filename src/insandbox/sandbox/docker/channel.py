"""Host side of the link to the in-container server: one long-lived attach stream, and where the
engine runs on this machine, a unix socket past the engine.

We open the container's attach endpoint ourselves on an asyncio connection and
upgrade it to a raw stream, so every request is a write and a read on one socket:
about a millisecond a command, against ~100 ms for a `docker exec`. The engine frames
the container's stdout and stderr (8-byte header: stream id, 3 zero bytes, length);
stdout carries the server's JSON replies, stderr only diagnostics. Requests and
replies themselves: ../channel.py.

The direct channel: every byte on the attach stream passes through the container's shim and
dockerd (~0.5 ms of their CPU a call at 32 sandboxes, ~1.7 ms at 256: benchmarks/bench_cpu.py).
So a local engine's sandbox also gets a listening unix socket of ours, bind-mounted read-only at
SOCKET_IN_SANDBOX, named to the server in front of its source; the server connects to it first
thing, before anything of a sample runs, and requests and replies go over it from then on. The
socket takes one connection: it is accepted only from the container's own first process (the
kernel's SO_PEERCRED pid against the engine's State.Pid; anything else fails the start), then the
listener is closed, so nothing in the sandbox (or on the host) can connect later: a connect there
is refused, and nobody but the host's root can bind the path again (a private folder on the host,
a read-only mount in the sandbox). The attach stream stays open for the server's stderr and for
its end. A server that cannot reach the socket answers on stdout, as before.
"""
from __future__ import annotations

import asyncio
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Optional
from urllib.parse import urlparse

from ..base import SandboxError
from ..channel import STREAM_LIMIT, ServerChannel

SOCKET_IN_SANDBOX = "/run/insandbox-channel.sock"
ACCEPT_TIMEOUT_S = 60.0  # as the handshake's
ATTACH_END_WAIT_S = 5.0  # after the socket ended: until the engine has seen the container stop


def listen(folder: Path) -> tuple[socket.socket, dict]:
    """A listening unix socket in a private folder of `folder` (the sandbox's own, etc_files.py), and
    the engine's read-only bind of it at SOCKET_IN_SANDBOX."""
    private = folder / "channel"
    private.mkdir(mode=0o700)
    path = private / "server.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        os.chmod(path, 0o666)  # connect needs write permission: the container's root may be a mapped uid
        sock.listen(1)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock, {str(path): {"bind": SOCKET_IN_SANDBOX, "mode": "ro"}}


def peer_pid(sock: socket.socket) -> int:
    pid, _, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return pid


class Channel(ServerChannel):
    gone_reason = "the container's server exited"

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, name: str):
        self.reader = reader
        self.listener: Optional[socket.socket] = None  # the direct channel's, until the server connected
        self.server_pid: Optional[Callable[[], Awaitable[int]]] = None  # the container's first process, host pid
        self.direct = False  # requests and replies go over the unix socket
        self._accepting: Optional[asyncio.Future] = None  # waits for the server's connection (offer_socket)
        super().__init__(writer, name)

    def offer_socket(self, listener: socket.socket, server_pid: Callable[[], Awaitable[int]]) -> str:
        """Take the server's connection on `listener` (see the module's docstring); returns the line that
        names the socket to the server, to go in front of its source."""
        self.listener, self.server_pid = listener, server_pid
        self._accepting = asyncio.ensure_future(self._accept())
        return f"CHANNEL_SOCKET = {SOCKET_IN_SANDBOX!r}\n"

    async def _accept(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        listener = self.listener
        try:
            conn, _ = await asyncio.wait_for(asyncio.get_running_loop().sock_accept(listener), ACCEPT_TIMEOUT_S)
        finally:  # one connection, ever: a connect after this is refused. The file stays: the engine's
            # archive API mounts every bind of the container again, and a missing source fails it
            listener.close()
            self.listener = None
        try:
            expected = await self.server_pid()
            if peer_pid(conn) != expected:
                raise ConnectionRefusedError(f"a process other than the sandbox's server (pid {peer_pid(conn)}, "
                                             f"not {expected}) connected to its channel")
        except BaseException:
            conn.close()
            raise
        return await asyncio.open_unix_connection(sock=conn, limit=STREAM_LIMIT)

    def _dispatch(self, msg: dict) -> None:
        accepting = self._accepting
        if msg.get("ready") and not self.direct and accepting is not None and not accepting.done():
            accepting.cancel()  # ready on stdout: the server could not connect; nobody else may
        super()._dispatch(msg)

    async def _read_socket(self, reader: asyncio.StreamReader) -> None:
        while True:
            data = await reader.read(1 << 20)
            if not data:
                return
            self._feed(data)

    async def close(self) -> None:
        accepting = self._accepting
        if accepting is not None and not accepting.done():
            accepting.cancel()
            await asyncio.gather(accepting, return_exceptions=True)
        if self.direct:
            try:
                self._attach_writer.close()
            except Exception:
                pass
        await super().close()

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

    async def _read_replies(self) -> None:
        attach = asyncio.ensure_future(self._read_attach())
        try:
            accepting = self._accepting
            if accepting is None:
                return await attach
            await asyncio.wait([attach, accepting], return_when=asyncio.FIRST_COMPLETED)
            if attach.done():  # the server ended before it connected (or never will): as before
                return attach.result()
            if accepting.cancelled() or isinstance(accepting.exception(), asyncio.TimeoutError):
                return await attach  # the server answers on stdout (it could not reach the socket)
            if accepting.exception() is not None:
                raise accepting.exception()  # a stranger connected: the channel cannot be trusted
            reader, writer = accepting.result()
            self._attach_writer, self.writer, self.direct = self.writer, writer, True
            replies = asyncio.ensure_future(self._read_socket(reader))
            try:
                await asyncio.wait([attach, replies], return_when=asyncio.FIRST_COMPLETED)
                if replies.done() and not attach.done():
                    # the socket ends as the server's process dies, before the engine has seen the container
                    # stop; the attach stream ends after it has: then the engine can say why (OOM, ...)
                    await asyncio.wait([attach], timeout=ATTACH_END_WAIT_S)
                for task in (replies, attach):
                    if task.done():
                        return task.result()
            finally:
                replies.cancel()
        finally:
            attach.cancel()

    async def _read_attach(self) -> None:
        while True:
            header = await self.reader.readexactly(8)
            stream, size = header[0], struct.unpack(">I", header[4:])[0]
            data = await self.reader.readexactly(size)
            if stream == 2:
                self._note_stderr(data)
            else:
                self._feed(data)
