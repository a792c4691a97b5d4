"""A Docker sandbox's files: looking paths up, reading and writing them, copying folders in, and
copy-back (the output folder, file by file, under the copy limits).

Small files go through the in-container server (byte-exact, ~2 ms, and procfs or in-container mounts
are seen as the model sees them); big ones and whole folders through the engine's archive API (~60
ms and engine CPU per call), which also reads a stopped container's files.
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
from ..base import (
    BLOCK_DEVICE,
    CHAR_DEVICE,
    DIRECTORY,
    FIFO,
    FILE,
    SOCKET,
    SYMLINK,
    CopyLimits,
    CopyResult,
    FileStat,
    OperationError,
    SandboxError,
    SandboxFileError,
    ServerError,
)
from ..copyback import CopyBudget, Entry, host_path, human_size, link_or_copy
from ..guest import protocol
from . import archive, engine

MAX_LINK_HOPS = 8
LIST_MAX_ENTRIES = 100_000
READ_BATCH_BYTES = 8 << 20  # small files per copy-back request
CHANNEL_GRACE_S = 30.0  # beyond an operation's own time, before the sandbox is called dead

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


def _file_stat(reply: dict) -> Optional[FileStat]:
    if not reply.get("exists"):
        return None
    return FileStat(name=posixpath.basename(reply["path"]), size=int(reply.get("size") or 0),
                    mode=int(reply.get("mode") or 0), kind=reply.get("kind", FILE), link_target=reply.get("target", ""))


def _not_a_file(path: str, kind: str) -> SandboxFileError:
    return SandboxFileError(f"{path} is a {kind}, not a regular file")


class DockerFiles:
    """The file half of DockerSandbox (it provides container_id, spec, exec, _request, _channel_free and
    _channel_alive)."""

    async def stat(self, path: str) -> Optional[FileStat]:
        if self._channel_free():
            try:
                return _file_stat(await self._request(protocol.STAT, CHANNEL_GRACE_S, path=path, follow=False))
            except ServerError as e:
                raise SandboxFileError(f"{path}: {e.message}") from None
            except SandboxError:
                pass  # the server is gone: the engine still sees the container's files
        return await self._engine_stat(path)

    async def resolve(self, path: str) -> tuple[str, Optional[FileStat]]:
        if self._channel_free():
            try:
                reply = await self._request(protocol.STAT, CHANNEL_GRACE_S, path=path, follow=True)
                return reply["path"], _file_stat(reply)
            except ServerError as e:
                raise SandboxFileError(f"{path}: {e.message}") from None
            except SandboxError:
                pass
        for _ in range(MAX_LINK_HOPS):
            st = await self._engine_stat(path)
            if st is None or st.kind != SYMLINK:
                return path, st
            target = st.link_target
            path = target if target.startswith("/") else posixpath.normpath(
                posixpath.join(posixpath.dirname(path), target))
        raise SandboxFileError(f"{path}: too many levels of symbolic links")

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

    async def _engine_stat(self, path: str) -> Optional[FileStat]:
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

    async def read_file(self, path: str, max_bytes: Optional[int] = None) -> bytes:
        import docker.errors

        path, st = await self.resolve(path)
        if st is None:
            raise SandboxFileError(f"{path}: no such file")
        if not st.is_file:
            raise _not_a_file(path, st.kind)
        if max_bytes is not None and st.size > max_bytes:
            raise SandboxFileError(f"{path} is {st.size:,} bytes, over the {max_bytes:,}-byte limit")
        if st.size <= self.spec.fast_file_max_bytes and self._channel_free():
            try:
                reply = await self._request(protocol.READ, CHANNEL_GRACE_S, path=path,
                                            max_bytes=self.spec.fast_file_max_bytes)
                if not reply.get("too_large"):  # it may have grown since the stat
                    return base64.b64decode(reply["data"])
            except ServerError as e:  # the file's problem (gone, unreadable), not the sandbox's
                raise SandboxFileError(f"cannot read {path}: {e.message}") from None
            except SandboxError:
                pass  # the server is gone (stopped container): the archive API still reads its files
        await self._settled()
        api = engine.api()

        def fetch() -> bytes:
            stream, _ = api.get_archive(self.container_id, os.fsencode(path))
            with archive.spool(stream) as f:
                member, data = archive.first_file(f)
            if not member.isreg():
                raise _not_a_file(path, archive.member_kind(member))
            return data

        try:
            return await engine.call(fetch)
        except docker.errors.NotFound:
            raise SandboxFileError(f"{path}: no such file") from None

    async def write_file(self, path: str, data: bytes, mode: Optional[int] = None) -> None:
        import docker.errors

        path, st = await self.resolve(path)  # write where a symlink points, as open() would
        if st is not None and not st.is_file:
            raise _not_a_file(path, st.kind)
        if len(data) <= self.spec.fast_file_max_bytes and self._channel_free():
            try:
                await self._request(protocol.WRITE, CHANNEL_GRACE_S, path=path,
                                    data=base64.b64encode(data).decode("ascii"), mode=0o644 if mode is None else mode)
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
        await self._mkdir(container_dir)
        with archive.tar_of(Path(host_path)) as tar:
            await engine.call(engine.api().put_archive, self.container_id, container_dir, tar)

    async def copy_in_files(self, files: dict[str, bytes], container_dir: str) -> None:
        await self._mkdir(container_dir)
        await engine.call(engine.api().put_archive, self.container_id, container_dir, archive.tar_of_texts(files))

    async def _mkdir(self, container_dir: str) -> None:
        res = await self.exec(["mkdir", "-p", "--", container_dir])
        if res.exit_code != 0:
            raise SandboxError(f"cannot create {container_dir} in the sandbox: {res.stderr.strip()}")

    # ------------------------------------------------------------------ copy-back
    async def copy_out(self, container_dir: str, host_dir: Path, limits: Optional[CopyLimits] = None) -> CopyResult:
        """File by file: the server lists the folder (never following links), the budget picks what
        fits, small files come in batches through the server and big ones one by one through the
        archive API. With the server gone (stopped container) the engine streams the folder and the
        same rules apply member by member."""
        host_dir = Path(host_dir)
        host_dir.mkdir(parents=True, exist_ok=True)
        budget = CopyBudget(limits)
        root = container_dir.rstrip("/") or "/"
        listing = None
        if self._channel_free():
            try:
                listing = await self._request(protocol.LIST_TREE, CHANNEL_GRACE_S, path=root,
                                              max_entries=LIST_MAX_ENTRIES)
            except (SandboxError, OperationError):
                listing = None
        if listing is None:
            files = await self._copy_streamed(root, host_dir, budget)
        else:
            files = await self._copy_listed(root, listing, host_dir, budget)
        return CopyResult(files, budget.skipped)

    async def _copy_listed(self, root: str, listing: dict, dest: Path, budget: CopyBudget) -> list[str]:
        if listing.get("truncated"):
            budget.skip("...", f"the folder holds more than {LIST_MAX_ENTRIES:,} entries; the rest were not looked at")
        small, big, links = [], [], []
        for raw in listing["entries"]:
            key = tuple(raw["link_key"]) if raw.get("link_key") else None
            e = Entry(raw["path"], raw["kind"], int(raw.get("size") or 0), key, raw.get("target", ""))
            target = host_path(dest, e.path)
            if target is None:
                budget.skip(e.path, "its path leads outside the output folder")
                continue
            d = budget.decide(e)
            if d.action == "dir":
                target.mkdir(parents=True, exist_ok=True)
            elif d.action == "copy":
                (small if e.size <= self.spec.fast_file_max_bytes else big).append((e, target))
            elif d.action == "link":
                links.append((d.source, e))
        written: list[str] = []
        for batch in _batches(small, READ_BATCH_BYTES):
            reply = await self._request(protocol.READ_MANY, CHANNEL_GRACE_S, files=[
                {"path": f"{root}/{e.path}", "max_bytes": max(e.size, self.spec.fast_file_max_bytes)}
                for e, _ in batch])
            for (e, target), item in zip(batch, reply["files"], strict=True):
                if "error" in item:
                    budget.skip(e.path, f"not copied: {item['error']}", e.size)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                hostfiles.write_bytes(target, base64.b64decode(item["data"]))
                written.append(e.path)
        for e, target in big:
            why = await self._fetch_one(f"{root}/{e.path}", target, budget.limits.max_file_bytes)
            if why:
                budget.skip(e.path, why, e.size)
            else:
                written.append(e.path)
        copied = set(written)
        for first, e in links:
            if first in copied and link_or_copy(dest, first, e.path):
                written.append(e.path)
            else:
                budget.skip(e.path, f"hard link to {first!r}, which was not copied", e.size)
        return written

    async def _fetch_one(self, path: str, target: Path, max_bytes: Optional[int]) -> Optional[str]:
        """One big file through the archive API; returns why it was not copied, or None."""
        import docker.errors

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

    async def _copy_streamed(self, root: str, dest: Path, budget: CopyBudget) -> list[str]:
        import docker.errors

        await self._settled()
        api = engine.api()

        def fetch() -> list[str]:
            try:
                stream, _ = api.get_archive(self.container_id, os.fsencode(root))
            except docker.errors.NotFound:
                return []
            return archive.extract_streamed(stream, dest, budget, strip_first=True)

        return await engine.call(fetch)


def _batches(items: list, max_bytes: int) -> list[list]:
    """Consecutive groups whose files add up to at most max_bytes (one big file alone)."""
    out, cur, size = [], [], 0
    for item in items:
        n = item[0].size
        if cur and size + n > max_bytes:
            out.append(cur)
            cur, size = [], 0
        cur.append(item)
        size += n
    if cur:
        out.append(cur)
    return out
