"""The direct channel (sandbox/docker/channel.py): requests and replies past the engine, over a
unix socket that takes one connection, from the container's own first process, and is gone from
the host and refused inside the sandbox once the server is connected. Real Docker containers."""
from __future__ import annotations

import asyncio
import socket

import pytest

from insandbox.sandbox.base import SandboxError
from insandbox.sandbox.docker import backend, channel, etc_files

CONNECT = ("python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
           "s.connect('/run/insandbox-channel.sock'); print('connected')\" 2>&1 | tail -1")


def refused_on_host(sb) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(str(etc_files.root() / sb.name / "channel" / "server.sock"))
        except ConnectionRefusedError:
            return True
    return False


def test_requests_bypass_the_engine_and_nobody_can_connect_afterwards(sandbox_factory, run_async):
    async def go():
        sb = await sandbox_factory()
        assert sb.channel.direct
        assert refused_on_host(sb)  # nothing listens any more
        inside = await sb.run(CONNECT)  # root in the sandbox, through the bind mount
        assert "ConnectionRefusedError" in inside.output and "connected" not in inside.output.split()
        # the channel still serves: state, files, a reset
        assert (await sb.run("cd /tmp && export X=1")).exit_code == 0
        assert (await sb.run("echo $X $PWD")).output.strip() == "1 /tmp"
        await sb.write_file("/testbed/a.txt", b"abc")
        assert await sb.read_file("/testbed/a.txt") == b"abc"
    run_async(go())


def test_a_stranger_that_connects_first_fails_the_start(monkeypatch, docker_image, run_async):
    """Whoever reaches the socket before the server (here: this very process) is not the container's
    first process: the start fails rather than talk to it."""
    strangers = []

    def listen_and_intrude(folder):
        sock, bind = channel.listen(folder)
        intruder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        intruder.connect(sock.getsockname())
        strangers.append(intruder)
        return sock, bind
    monkeypatch.setattr(backend, "listen", listen_and_intrude)

    async def go():
        sb = backend.DockerSandbox(backend.SandboxSpec(image=docker_image, run_id="test"))
        try:
            with pytest.raises(SandboxError, match="other than the sandbox's server"):
                await sb.start()
        finally:
            await sb.close()
        assert sb.container_id is None or not backend.LIVE.get(sb.container_id)
    run_async(go())
    assert strangers


def test_a_server_that_cannot_reach_the_socket_answers_on_stdout(monkeypatch, sandbox_factory, run_async):
    offer = channel.Channel.offer_socket

    def offer_elsewhere(self, listener, server_pid):
        offer(self, listener, server_pid)
        return "CHANNEL_SOCKET = '/nonexistent/channel.sock'\n"
    monkeypatch.setattr(channel.Channel, "offer_socket", offer_elsewhere)

    async def go():
        sb = await sandbox_factory()
        assert not sb.channel.direct
        assert (await sb.run("echo over stdout")).output.strip() == "over stdout"
        await asyncio.sleep(0.1)
        assert refused_on_host(sb)  # the listener went at once
    run_async(go())


def test_the_attach_stream_when_asked(monkeypatch, sandbox_factory, run_async):
    monkeypatch.setenv("INSANDBOX_CHANNEL", "attach")

    async def go():
        sb = await sandbox_factory()
        assert not sb.channel.direct
        assert not (etc_files.root() / sb.name / "channel").exists()
        assert (await sb.run("echo attached")).output.strip() == "attached"
    run_async(go())
