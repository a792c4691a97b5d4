"""Docker backend: one container per sandbox, the in-container server as its PID 1.

Life of a sandbox: create the container (labelled with the run id and the owning
process) -> open the attach stream -> start -> hand the server its source -> ready.
Commands go over the attach stream; files go through the engine's archive API;
`close()` removes the container with `rm -f` (no 10 s stop grace: nothing inside
needs a clean shutdown). If this process dies without closing, the container's
stdin reaches EOF, the server exits and the container stops; `insandbox clean`
removes what is left.
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import posixpath
import socket
import time
import uuid
from pathlib import Path
from typing import Optional

from . import archive, engine
from .base import CommandResult, ExecResult, FileStat, SandboxError, SandboxFileError, SandboxSpec, ServerError
from .channel import Channel
from .server import BOOTSTRAP

LABEL = "insandbox"  # every container we create carries insandbox=1
LABEL_RUN = "insandbox.run_id"
LABEL_OWNER = "insandbox.owner"  # "<hostname>:<pid>" of the process that created it
LABEL_CREATED = "insandbox.created"
CHANNEL_GRACE_S = 30.0  # beyond a command's own timeout, before we call the sandbox dead
MAX_LINK_HOPS = 8

_SERVER_SOURCE: Optional[str] = None
LIVE: dict[str, str] = {}  # container id -> name, of sandboxes this process has not removed yet


def remove_live_now() -> None:
    """Last resort at a forced exit: remove this process's sandboxes, blocking."""
    for cid in list(LIVE):
        try:
            engine.api().remove_container(cid, force=True, v=True)
        except Exception:
            pass
        LIVE.pop(cid, None)


class ImageNotFound(SandboxError):
    def __init__(self, image: str):
        super().__init__(f"image {image!r} not found; build it with `insandbox image build --tag {image}`")
        self.image = image


def server_source() -> str:
    global _SERVER_SOURCE
    if _SERVER_SOURCE is None:
        _SERVER_SOURCE = (Path(__file__).parent / "server.py").read_text()
    return _SERVER_SOURCE


def owner_label() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class DockerSandbox:
    def __init__(self, spec: SandboxSpec):
        self.spec = spec
        self.container_id: Optional[str] = None
        self.name = f"insandbox-{spec.run_id or 'x'}-{uuid.uuid4().hex[:6]}"
        self.channel: Optional[Channel] = None
        self.server_info: dict = {}
        self.timings: dict[str, float] = {}
        self._closed = False

    # ------------------------------------------------------------------ lifetime
    async def start(self) -> None:
        import docker.errors

        api = engine.api()
        lim = self.spec.limits
        host_config = api.create_host_config(
            mem_limit=lim.memory, memswap_limit=lim.memory,  # same value: no swap on top
            nano_cpus=int(lim.cpus * 1e9) if lim.cpus else None,
            pids_limit=lim.pids, network_mode=lim.network, init=False)
        labels = {LABEL: "1", LABEL_RUN: self.spec.run_id, LABEL_OWNER: owner_label(),
                  LABEL_CREATED: str(int(time.time()))}
        t0 = time.perf_counter()
        creating = asyncio.ensure_future(engine.call(
            api.create_container, self.spec.image, command=["python3", "-c", BOOTSTRAP],
            entrypoint=[], stdin_open=True, detach=False, tty=False, working_dir=self.spec.workdir,
            environment=self.spec.env or None, labels=labels, name=self.name, hostname="sandbox",
            host_config=host_config))
        try:
            created = await asyncio.shield(creating)
        except asyncio.CancelledError:
            # the engine may create the container anyway: wait for it, then remove it
            try:
                self.container_id = (await creating)["Id"]
            except Exception:
                pass
            await self.close()
            raise
        except docker.errors.ImageNotFound:
            raise ImageNotFound(self.spec.image) from None
        except docker.errors.APIError as e:
            if e.status_code == 404 and "image" in str(e).lower():
                raise ImageNotFound(self.spec.image) from None
            raise SandboxError(f"could not create the sandbox container: {e.explanation or e}") from e
        self.container_id = created["Id"]
        LIVE[self.container_id] = self.name
        t1 = time.perf_counter()
        try:
            self.channel = await Channel.attach(engine.docker_host(), api.api_version, self.container_id, self.name)
            await engine.call(api.start, self.container_id)
            t2 = time.perf_counter()
            self.server_info = await self.channel.handshake(server_source())
        except docker.errors.APIError as e:
            await self.close()
            raise SandboxError(f"could not start the sandbox container: {e.explanation or e}") from e
        except BaseException:
            await self.close()
            raise
        self.timings.update(create_s=t1 - t0, start_s=t2 - t1, ready_s=time.perf_counter() - t2)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.channel is not None:
            await self.channel.close()
        if self.container_id:
            try:
                await asyncio.shield(engine.call(engine.api().remove_container, self.container_id, force=True, v=True))
            except Exception as e:
                if not engine.is_not_found(e) and "already in progress" not in str(e):
                    raise SandboxError(f"could not remove container {self.name}: {e}") from e
            LIVE.pop(self.container_id, None)

    async def _dead_reason(self) -> str:
        """Why the container stopped, from the engine (OOM kill, exit code)."""
        try:
            info = await engine.call(engine.api().inspect_container, self.container_id)
        except Exception:
            return "the container no longer exists"
        state = info.get("State", {})
        if state.get("OOMKilled"):
            return "the container was killed for exceeding its memory limit"
        if not state.get("Running"):
            return f"the container stopped (exit code {state.get('ExitCode')})"
        return "the container's server stopped answering"

    def _channel_alive(self) -> bool:
        return self.channel is not None and not self.channel.closed_reason

    def _channel_free(self) -> bool:
        """Alive and idle: file operations may use the server (else the archive API)."""
        return self._channel_alive() and not self.channel.busy

    async def _request(self, op: str, wait_s: float, **fields) -> dict:
        if self.channel is None:
            raise SandboxError("sandbox not started")
        try:
            return await self.channel.request(op, wait_s, **fields)
        except SandboxError as e:
            if self.channel.closed_reason:
                raise SandboxError(f"{e} ({await self._dead_reason()})") from None
            raise

    # ------------------------------------------------------------------ commands
    async def run(self, command: str, timeout: float = 120.0) -> CommandResult:
        reply = await self._request("run", timeout + CHANNEL_GRACE_S, cmd=command, timeout=timeout,
                                    limit=self.spec.output_limit_chars)
        return CommandResult(
            output=reply["output"], output_tail=reply.get("output_tail", ""), cut_chars=reply.get("cut_chars", 0),
            exit_code=reply.get("exit_code"), total_chars=reply.get("total_chars", 0),
            total_bytes=reply.get("total_bytes", 0), timed_out=reply.get("timed_out", False),
            shell_restarted=reply.get("shell_restarted", False), shell_exited=reply.get("shell_exited", False),
            duration_s=reply.get("duration_s", 0.0), cwd=reply.get("cwd", ""))

    async def exec(self, argv: list[str], timeout: float = 60.0, stdin: str = "") -> ExecResult:
        reply = await self._request("exec", timeout + CHANNEL_GRACE_S, argv=argv, timeout=timeout, stdin=stdin)
        return ExecResult(exit_code=reply.get("exit_code"), stdout=reply.get("stdout", ""),
                          stderr=reply.get("stderr", ""), timed_out=reply.get("timed_out", False))

    # ------------------------------------------------------------------ files
    async def stat(self, path: str) -> Optional[FileStat]:
        api = engine.api()
        url = api._url("/containers/{0}/archive", self.container_id)
        resp = await engine.call(api.head, url, params={"path": path})
        if resp.status_code == 404:
            return None
        if resp.status_code >= 400:
            raise SandboxError(f"stat {path}: engine answered {resp.status_code}")
        raw = json.loads(base64.b64decode(resp.headers.get("X-Docker-Container-Path-Stat", "e30=")))
        mode = int(raw.get("mode", 0))
        return FileStat(name=raw.get("name", posixpath.basename(path)), size=int(raw.get("size", 0)),
                        mode=mode & 0o7777, is_dir=bool(mode & (1 << 31)), link_target=raw.get("linkTarget", ""))

    async def resolve(self, path: str) -> tuple[str, Optional[FileStat]]:
        """Follow symlinks to the real path; returns it with its stat (None if missing)."""
        for _ in range(MAX_LINK_HOPS):
            st = await self.stat(path)
            if st is None or not st.link_target:
                return path, st
            target = st.link_target
            path = target if target.startswith("/") else posixpath.normpath(
                posixpath.join(posixpath.dirname(path), target))
        raise SandboxFileError(f"{path}: too many levels of symbolic links")

    async def read_file(self, path: str, max_bytes: Optional[int] = None) -> bytes:
        import docker.errors

        path, st = await self.resolve(path)
        if st is None:
            raise SandboxFileError(f"{path}: no such file")
        if st.is_dir:
            raise SandboxFileError(f"{path} is a directory")
        if max_bytes is not None and st.size > max_bytes:
            raise SandboxFileError(f"{path} is {st.size} bytes, over the {max_bytes}-byte limit")
        if st.size <= self.spec.fast_file_max_bytes and self._channel_free():
            try:
                reply = await self._request("read", CHANNEL_GRACE_S, path=path,
                                            max_bytes=self.spec.fast_file_max_bytes)
                if not reply.get("too_large"):  # it may have grown since the stat
                    return base64.b64decode(reply["data"])
            except ServerError as e:  # the file's problem (gone, unreadable), not the sandbox's
                raise SandboxFileError(f"cannot read {path}: {e.message}") from None
            except SandboxError:
                pass  # the server is gone (stopped container): the archive API still reads its files
        api = engine.api()

        def fetch() -> bytes:
            stream, _ = api.get_archive(self.container_id, path)
            with archive.spool(stream) as f:
                return archive.first_file(f)[1]

        try:
            return await engine.call(fetch)
        except docker.errors.NotFound:
            raise SandboxFileError(f"{path}: no such file") from None

    async def write_file(self, path: str, data: bytes, mode: Optional[int] = None) -> None:
        import docker.errors

        if len(data) <= self.spec.fast_file_max_bytes and self._channel_free():
            try:
                await self._request("write", CHANNEL_GRACE_S, path=path, data=base64.b64encode(data).decode("ascii"),
                                    mode=0o644 if mode is None else mode)
                return
            except ServerError as e:
                raise SandboxFileError(f"cannot write {path}: {e.message}") from None
        api = engine.api()
        parent, name = posixpath.split(posixpath.normpath(path))
        blob = archive.single_file_tar(name, data, 0o644 if mode is None else mode)
        try:
            await engine.call(api.put_archive, self.container_id, parent or "/", blob)
        except docker.errors.NotFound:  # missing parent directory: create it, once
            res = await self.exec(["mkdir", "-p", "--", parent])
            if res.exit_code != 0:
                raise SandboxFileError(f"cannot create directory {parent}: {res.stderr.strip()}") from None
            await engine.call(api.put_archive, self.container_id, parent, blob)
        except docker.errors.APIError as e:
            raise SandboxFileError(f"cannot write {path}: {e.explanation or e}") from None

    async def remove_file(self, path: str) -> None:
        res = await self.exec(["rm", "-f", "--", path])
        if res.exit_code != 0:
            raise SandboxFileError(f"cannot remove {path}: {res.stderr.strip()}")

    async def copy_in(self, host_path: Path, container_dir: str) -> None:
        res = await self.exec(["mkdir", "-p", "--", container_dir])
        if res.exit_code != 0:
            raise SandboxError(f"cannot create {container_dir} in the sandbox: {res.stderr.strip()}")
        with archive.tar_of(Path(host_path)) as tar:
            await engine.call(engine.api().put_archive, self.container_id, container_dir, tar)

    async def copy_in_files(self, files: dict[str, bytes], container_dir: str) -> None:
        """Place in-memory files {relative path: bytes} under container_dir."""
        res = await self.exec(["mkdir", "-p", "--", container_dir])
        if res.exit_code != 0:
            raise SandboxError(f"cannot create {container_dir} in the sandbox: {res.stderr.strip()}")
        await engine.call(engine.api().put_archive, self.container_id, container_dir, archive.tar_of_texts(files))

    async def copy_out(self, container_dir: str, host_dir: Path, max_bytes: Optional[int] = None) -> list[str]:
        import docker.errors

        api = engine.api()

        def fetch() -> list[str]:
            try:
                stream, _ = api.get_archive(self.container_id, container_dir.rstrip("/") or "/")
            except docker.errors.NotFound:
                return []
            with archive.spool(stream, max_bytes) as f:
                written, _ = archive.extract_safely(f, Path(host_dir), strip_first=True)
                return written

        Path(host_dir).mkdir(parents=True, exist_ok=True)
        if self._channel_free():
            probe = await self._request("empty_dir", CHANNEL_GRACE_S, path=container_dir)
            if probe["empty"]:  # nothing to copy: spare the engine an archive call
                return []
        try:
            return await engine.call(fetch)
        except archive.ArchiveTooLarge:
            raise SandboxError(f"{container_dir} holds more than {max_bytes} bytes; not copied") from None
