"""A sandbox backend of the tests' own, and the example of docs/backends/writing-a-backend.md: a
folder of this machine as the sandbox's root, bubblewrap around it, insandbox's in-sandbox server as
its first process, and no container engine.

It writes the five members every backend must: `start`, `close` and `alive` here, `run` and `exec`
through ServerCommands (the in-sandbox server gives the persistent shell and its timeouts). Its files
are Sandbox's defaults, through `exec`. What it cannot do, its Capabilities say, and the rest of
insandbox refuses in one line: any resource or disk limit, networks other than none and host,
recycling, snapshots. One line registers it: register_backend("fake", "tests.sandbox.fake:FakeSandbox").

It keeps the host's files and environment out (only /usr and its links, read-only) and its processes
in a pid namespace of their own; it has no seccomp filter, no limits, no overlay: never give it a model.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import ClassVar, Optional

from insandbox.sandbox import Capabilities, Sandbox, SandboxBrokenByItself, SandboxError, SandboxSpec
from insandbox.sandbox.channel import STREAM_LIMIT, PipeChannel, ServerSilent, server_source
from insandbox.sandbox.guest.protocol import BOOTSTRAP
from insandbox.sandbox.servercommands import ServerCommands

STARTED: list[str] = []  # roots of every fake sandbox started, for the tests to look at
HOST_TREES = ("usr", "bin", "sbin", "lib", "lib32", "lib64")  # the host's programs, read-only, or links to them
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class FakeSandbox(ServerCommands, Sandbox):
    backend: ClassVar[str] = "fake"
    capabilities: ClassVar[Capabilities] = Capabilities(network_modes=("none", "host"))

    def __init__(self, spec: SandboxSpec):
        super().__init__(spec)  # refuses a spec its Capabilities cannot meet
        self.root: Optional[Path] = None
        self.proc: Optional[asyncio.subprocess.Process] = None
        self.channel: Optional[PipeChannel] = None
        self._closed = False

    async def start(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="insandbox-fake-"))
        STARTED.append(str(self.root))
        for folder in ("etc", "root", "tmp", self.spec.workdir.lstrip("/")):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        (self.root / "etc/hostname").write_text("sandbox\n")
        (self.root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
        argv = ["bwrap", "--unshare-all", "--unshare-user", "--uid", "0", "--gid", "0", "--die-with-parent",
                "--new-session", "--as-pid-1", "--hostname", "sandbox", "--bind", str(self.root), "/"]
        if self.spec.limits.network == "host":
            argv.append("--share-net")
            shutil.copyfile("/etc/resolv.conf", self.root / "etc/resolv.conf")
        for name in HOST_TREES:
            host = Path("/", name)
            if host.is_symlink():
                (self.root / name).symlink_to(os.readlink(host))
            elif host.is_dir():
                argv += ["--ro-bind", str(host), str(host)]
        argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm", "--chdir", self.spec.workdir,
                 "--clearenv", "--setenv", "PATH", PATH, "--setenv", "HOME", "/root"]
        for key, value in self.spec.env.items():
            argv += ["--setenv", str(key), str(value)]
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *argv, "python3", "-c", BOOTSTRAP, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, limit=STREAM_LIMIT, start_new_session=True)
            self.channel = PipeChannel(self.proc.stdin, self.proc.stdout, self.proc.stderr, self.root.name)
            await self.channel.handshake(server_source())
        except BaseException:
            await self.close()
            raise
        self.uses = 1

    @property
    def alive(self) -> bool:
        return self.channel is not None and not self.channel.closed_reason and not self._closed

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.channel is not None:
            await self.channel.close()  # stdin's end: the server ends everything in the sandbox
        if self.proc is not None and self.proc.returncode is None:
            try:
                await asyncio.wait_for(self.proc.wait(), 2.0)
            except asyncio.TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    async def _request(self, op: str, wait_s: float, **fields) -> dict:
        """ServerCommands' way to the server. A channel that ended is the sandbox's own doing unless this
        machine saw otherwise: this process closed it, or bwrap (outside its namespaces) was killed."""
        if self.channel is None:
            raise SandboxError("sandbox not started")
        try:
            return await self.channel.request(op, wait_s, **fields)
        except SandboxError as e:
            if not (self.channel.closed_reason or isinstance(e, ServerSilent)):
                raise
            try:
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), 2.0)
            except asyncio.TimeoutError:
                pass
            if self._closed or (self.proc.returncode or 0) < 0:
                raise SandboxError(f"{e} (it was closed or killed from outside)") from None
            raise SandboxBrokenByItself(f"{e} (its server ended; nothing outside it stopped it)") from None
