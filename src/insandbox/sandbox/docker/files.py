"""A Docker sandbox's files: what the in-container server does not do, the engine's archive API does.

Small files go through the in-container server (../serverfiles.py: byte-exact, ~2 ms, and procfs or
in-container mounts are seen as the model sees them); big ones and whole folders through the engine's
archive API (~60 ms and engine CPU per call), which also reads a stopped container's files and a
running one's while its server is busy with a command. Under gVisor the sandbox's files live in its
own kernel's view (an overlay the host does not see into, nor it into the host's later writes): big
files and folders go through the server too while it answers (in pieces: ../execfiles.py).
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import posixpath
from pathlib import Path
from typing import Optional

from ...core import hostfiles
from .. import execfiles
from ..base import BLOCK_DEVICE, CHAR_DEVICE, DIRECTORY, FIFO, FILE, SOCKET, SYMLINK, FileStat, SandboxFileError
from ..copyback import CopyBudget, human_size
from ..serverfiles import CHANNEL_GRACE_S, ServerFiles, not_a_file  # noqa: F401 (CHANNEL_GRACE_S: the backend's)
from . import archive, engine

# Go's os.FileMode bits, as the engine reports a path's type
_GO_DIR, _GO_SYMLINK, _GO_DEVICE, _GO_FIFO, _GO_SOCKET, _GO_CHAR = 1 << 31, 1 << 27, 1 << 26, 1 << 25, 1 << 24, 1 << 21


def kind_of_go_mode(mode: int) -> str:
    if mode & _GO_DIR:
        return DIRECTORY
    if mode & _GO_SYMLINK:
        return SYMLINK
    if mode & _GO_FIFO:
        return FIFO
    if mode & _GO_SOCKET:
        return SOCKET
    if mode & _GO_DEVICE:
        return CHAR_DEVICE if mode & _GO_CHAR else BLOCK_DEVICE
    return FILE


class DockerFiles(ServerFiles):
    """The file half of DockerSandbox (it provides container_id, spec, exec, _request, _channel_free and
    _channel_alive)."""

    async def _settled(self) -> None:
        """With the server gone the container is stopping: wait (5 s at most) until it has stopped
        before reading its files through the engine. Podman reads a running container's files from
        inside its mount namespace, and a container that dies meanwhile gives an error or an empty
        archive; a stopped one it reads from its layers, as Docker always does. Podman says "stopped"
        (Running false) for the ~0.2 s its cleanup still unmounts the container, and "exited" after."""
        if self._channel_alive() or not self.container_id:
            return
        for _ in range(100):
            try:
                state = (await engine.call(engine.api().inspect_container, self.container_id)).get("State") or {}
            except Exception:
                return  # gone, or the engine is away: the read itself will say so
            if not state.get("Running") and state.get("Status") not in ("stopping", "stopped"):
                return
            await asyncio.sleep(0.05)

    def _through_the_server(self) -> bool:
        """gVisor, its server free: the archive API would not see the sandbox's own view of its files."""
        return self.gvisor and self._channel_free()

    async def _stat_elsewhere(self, path: str) -> Optional[FileStat]:
        """The engine's view (the container's own filesystem, not procfs or in-container mounts)."""
        await self._settled()
        api = engine.api()
        url = api._url("/containers/{0}/archive", self.container_id)
        try:
            raw_path = os.fsencode(path)
        except UnicodeEncodeError:
            raise SandboxFileError(f"{path!r}: the path holds characters that are not valid Unicode") from None
        resp = await engine.call(api.head, url, params={"path": raw_path})
        if resp.status_code == 404:
            return None
        if resp.status_code >= 400:  # e.g. a NUL byte in the path: the engine refuses it
            raise SandboxFileError(f"{path!r}: the engine cannot look this path up (HTTP {resp.status_code})")
        raw = json.loads(base64.b64decode(resp.headers.get("X-Docker-Container-Path-Stat", "e30=")))
        mode = int(raw.get("mode", 0))
        return FileStat(name=raw.get("name", posixpath.basename(path)), size=int(raw.get("size", 0)),
                        mode=mode & 0o7777, kind=kind_of_go_mode(mode), link_target=raw.get("linkTarget", ""))

    async def _read_elsewhere(self, path: str) -> bytes:
        import docker.errors

        if self._through_the_server():
            data = await execfiles.read_bytes(self, path, None, follow=True)
            if data is None:
                raise SandboxFileError(f"{path} is no longer a regular file")
            return data
        await self._settled()
        api = engine.api()

        def fetch() -> bytes:
            stream, _ = api.get_archive(self.container_id, os.fsencode(path))
            with archive.spool(stream) as f:
                member, data = archive.first_file(f)
            if not member.isreg():
                raise not_a_file(path, archive.member_kind(member))
            return data

        try:
            return await engine.call(fetch)
        except docker.errors.NotFound:
            raise SandboxFileError(f"{path}: no such file") from None

    async def _write_elsewhere(self, path: str, data: bytes, mode: int) -> None:
        import docker.errors

        if self._through_the_server():
            return await execfiles.write_file(self, path, data, mode)
        api = engine.api()
        parent, name = posixpath.split(posixpath.normpath(path))
        blob = archive.single_file_tar(name, data, mode)
        try:
            await engine.call(api.put_archive, self.container_id, parent or "/", blob)
        except docker.errors.NotFound:  # missing parent directory: create it, once
            res = await self.exec(["mkdir", "-p", "--", parent])
            if res.exit_code != 0:
                raise SandboxFileError(f"cannot create directory {parent}: {res.stderr.strip()}") from None
            await engine.call(api.put_archive, self.container_id, parent, blob)
        except docker.errors.APIError as e:
            raise SandboxFileError(f"cannot write {path}: {e.explanation or e}") from None

    async def copy_in(self, host_path: Path, container_dir: str) -> None:
        if self._through_the_server():
            return await execfiles.copy_in(self, Path(host_path), container_dir)
        await self._mkdir(container_dir)
        with archive.tar_of(Path(host_path)) as tar:
            await engine.call(engine.api().put_archive, self.container_id, container_dir, tar)

    async def copy_in_files(self, files: dict[str, bytes], container_dir: str) -> None:
        if self._through_the_server():
            return await super().copy_in_files(files, container_dir)  # file by file (Sandbox's)
        await self._mkdir(container_dir)
        await engine.call(engine.api().put_archive, self.container_id, container_dir, archive.tar_of_texts(files))

    # ------------------------------------------------------------------ copy-back
    async def _fetch_elsewhere(self, path: str, target: Path, max_bytes: Optional[int]) -> Optional[str]:
        """One big file through the archive API; returns why it was not copied, or None."""
        import docker.errors

        if self._through_the_server():
            data = await execfiles.read_bytes(self, path, max_bytes, follow=False)
            if data is None:
                return "changed while copying: no longer a regular file"
            if max_bytes is not None and len(data) > max_bytes:
                return "grew while copying, over the per-file limit"
            await asyncio.to_thread(hostfiles.write_bytes, target, data)
            return None
        api = engine.api()

        def fetch() -> Optional[str]:
            try:
                stream, stat = api.get_archive(self.container_id, os.fsencode(path))
            except docker.errors.NotFound:
                return "vanished while copying"
            size = int((stat or {}).get("size") or 0)
            if max_bytes is not None and size > max_bytes:  # grew since it was listed: do not stream it
                return f"grew to {human_size(size)} while copying, over the per-file limit"
            return archive.extract_single_file(stream, target, max_bytes)

        return await engine.call(fetch)

    async def _copy_elsewhere(self, root: str, dest: Path, budget: CopyBudget) -> list[str]:
        """The engine streams the folder (a stopped container's too); the same rules apply member by member."""
        import docker.errors

        await self._settled()
        api = engine.api()

        def fetch() -> list[str]:
            # the response is ours to close: once the budget stops reading, the engine stops sending
            resp = api._get(api._url("/containers/{0}/archive", self.container_id), params={"path": os.fsencode(root)},
                            stream=True, headers={"Accept-Encoding": "identity"})
            try:
                try:
                    api._raise_for_status(resp)
                except docker.errors.NotFound:
                    return []
                api._disable_socket_timeout(api._get_raw_response_socket(resp))  # as get_archive does
                return archive.extract_streamed(resp.iter_content(1 << 20, False), dest, budget, strip_first=True)
            finally:
                resp.close()

        return await engine.call(fetch)
