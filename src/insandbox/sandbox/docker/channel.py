"""Host side of the link to the in-container server: one long-lived attach stream.

We open the container's attach endpoint ourselves on an asyncio connection and
upgrade it to a raw stream, so every request is a write and a read on one socket:
about a millisecond a command, against ~100 ms for a `docker exec`. The engine frames
the container's stdout and stderr (8-byte header: stream id, 3 zero bytes, length);
stdout carries the server's JSON replies, stderr only diagnostics. Requests and
replies themselves: ../channel.py.
"""
from __future__ import annotations

import asyncio
import struct
from urllib.parse import urlparse

from ..base import SandboxError
from ..channel import STREAM_LIMIT, ServerChannel


class Channel(ServerChannel):
    gone_reason = "the container's server exited"

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, name: str):
        self.reader = reader
        super().__init__(writer, name)

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
        while True:
            header = await self.reader.readexactly(8)
            stream, size = header[0], struct.unpack(">I", header[4:])[0]
            data = await self.reader.readexactly(size)
            if stream == 2:
                self._note_stderr(data)
            else:
                self._feed(data)
