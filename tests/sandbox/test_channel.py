"""The host's side of the channel to the in-sandbox server, against a stand-in server (a process of
this test's own that answers on its stdout): a reply past the bound its request was given is refused
as it arrives, never read whole."""
from __future__ import annotations

import asyncio
import sys

import pytest

from insandbox.sandbox.base import SandboxError
from insandbox.sandbox.channel import STREAM_LIMIT, PipeChannel

# reads one request, then answers it with `size` bytes and no end of line yet, and waits
OVERSIZED = """
import json, sys, time
req = json.loads(sys.stdin.readline())
sys.stdout.write('{"id": %d, "ok": true, "entries": ["' % req["id"] + "x" * int(sys.argv[1]))
sys.stdout.flush()
time.sleep(60)
"""
# answers each request with a reply of `size` bytes, whole
HONEST = """
import json, sys
for line in sys.stdin:
    req = json.loads(line)
    sys.stdout.write(json.dumps({"id": req["id"], "ok": True, "data": "x" * int(sys.argv[1])}) + "\\n")
    sys.stdout.flush()
"""


async def _channel(script: str, size: int) -> tuple[PipeChannel, asyncio.subprocess.Process]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, str(size), stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                limit=STREAM_LIMIT)  # as the bwrap backend opens its server's
    return PipeChannel(proc.stdin, proc.stdout, proc.stderr, "stand-in"), proc


def test_a_reply_past_its_bound_is_refused_before_it_is_read_whole(run_async):
    """Regression: the host buffered a reply line of any length (a server in the sandbox could send
    gigabytes with no end of line). Now a bounded request's reply ends the channel as soon as it passes
    the bound, without waiting for the rest."""
    async def body():
        channel, proc = await _channel(OVERSIZED, 8 << 20)
        try:
            with pytest.raises(SandboxError, match="more than 65,536 bytes"):
                await channel.request("list_tree", 30.0, reply_limit=64 << 10, path="/")
            assert channel.closed_reason and "65,536" in channel.closed_reason
            assert len(channel._buf) < 8 << 20  # refused before the whole line had come
        finally:
            proc.kill()
            await proc.wait()
            await channel.close()
    run_async(body())


def test_replies_within_their_bound_and_unbounded_requests_pass(run_async):
    async def body():
        channel, proc = await _channel(HONEST, 100_000)
        try:
            reply = await channel.request("read", 30.0, reply_limit=200_000)
            assert len(reply["data"]) == 100_000
            reply = await channel.request("read", 30.0)  # no bound of its own: the channel's
            assert len(reply["data"]) == 100_000 and not channel.closed_reason
            with pytest.raises(SandboxError, match="more than 50,000 bytes"):
                await channel.request("read", 30.0, reply_limit=50_000)
        finally:
            proc.kill()
            await proc.wait()
            await channel.close()
    run_async(body())
