"""A sandbox's files through its in-sandbox server (guest/server.py), the fast way for small ones:
looking paths up as the model sees them (procfs and in-sandbox mounts included), reading and writing
single files byte-exact (~2 ms), listing a folder for copy-back and fetching its small files in
batches.

What the server cannot do (big files, a server busy with a command the caller gave up on, a server
that is gone) a backend does its own way, in the `_..._elsewhere` methods: the Docker backend through
the engine's archive API (docker/files.py), the bwrap backend on the host side through the
sandbox's root (bwrap/hostside.py). A mixin of a `Sandbox` subclass (base.py: `spec`, `exec`,
`remove_file`, `_mkdir`), which adds `_request(op, wait_s, **fields)` and `_channel_free()`.
"""
from __future__ import annotations

import base64
import posixpath
from pathlib import Path
from typing import Optional

from ..core import hostfiles
from .base import (
    FILE,
    SYMLINK,
    CopyLimits,
    CopyResult,
    FileStat,
    OperationError,
    SandboxError,
    SandboxFileError,
    ServerError,
)
from .copyback import CopyBudget, Entry, human_size, link_or_copy
from .guest import protocol

MAX_LINK_HOPS = 8
LIST_REPLY_SLACK_BYTES = 64 * 1024  # a listing's reply beyond its entries (the reply's own fields)
READ_BATCH_BYTES = 8 << 20  # small files per copy-back request
CHANNEL_GRACE_S = 30.0  # beyond an operation's own time, before the sandbox is called dead


def file_stat(reply: dict) -> Optional[FileStat]:
    if not reply.get("exists"):
        return None
    return FileStat(name=posixpath.basename(reply["path"]), size=int(reply.get("size") or 0),
                    mode=int(reply.get("mode") or 0), kind=reply.get("kind", FILE), link_target=reply.get("target", ""))


def not_a_file(path: str, kind: str) -> SandboxFileError:
    return SandboxFileError(f"{path} is a {kind}, not a regular file")


class ServerFiles:
    # ------------------------------------------------------------------ what a backend adds
    async def _stat_elsewhere(self, path: str) -> Optional[FileStat]:
        """The path itself (a final symlink not followed), without the server."""
        raise SandboxError("the sandbox's server is gone")

    async def _read_elsewhere(self, path: str) -> bytes:
        """A regular file's bytes (path already resolved), without the server or too big for it."""
        raise SandboxError("the sandbox's server is gone")

    async def _write_elsewhere(self, path: str, data: bytes, mode: int) -> None:
        raise SandboxError("the sandbox's server is gone")

    async def _fetch_elsewhere(self, path: str, target: Path, max_bytes: Optional[int]) -> Optional[str]:
        """One big file of a copy-back (not following links) into target; returns why it was not
        copied, or None."""
        raise SandboxError("the sandbox's server is gone")

    async def _copy_elsewhere(self, root: str, dest: Path, budget: CopyBudget) -> list[str]:
        """The whole copy-back without the server (it is busy or gone)."""
        raise SandboxError("the sandbox's server is gone")

    # ------------------------------------------------------------------ looking paths up
    async def stat(self, path: str) -> Optional[FileStat]:
        if self._channel_free():
            try:
                return file_stat(await self._request(protocol.STAT, CHANNEL_GRACE_S, path=path, follow=False))
            except ServerError as e:
                raise SandboxFileError(f"{path}: {e.message}") from None
            except SandboxError:
                pass  # the server is gone: the backend may still see the sandbox's files
        return await self._stat_elsewhere(path)

    async def resolve(self, path: str) -> tuple[str, Optional[FileStat]]:
        if self._channel_free():
            try:
                reply = await self._request(protocol.STAT, CHANNEL_GRACE_S, path=path, follow=True)
                return reply["path"], file_stat(reply)
            except ServerError as e:
                raise SandboxFileError(f"{path}: {e.message}") from None
            except SandboxError:
                pass
        for _ in range(MAX_LINK_HOPS):
            st = await self._stat_elsewhere(path)
            if st is None or st.kind != SYMLINK:
                return path, st
            target = st.link_target
            path = target if target.startswith("/") else posixpath.normpath(
                posixpath.join(posixpath.dirname(path), target))
        raise SandboxFileError(f"{path}: too many levels of symbolic links")

    # ------------------------------------------------------------------ single files
    async def read_file(self, path: str, max_bytes: Optional[int] = None) -> bytes:
        path, st = await self.resolve(path)
        if st is None:
            raise SandboxFileError(f"{path}: no such file")
        if not st.is_file:
            raise not_a_file(path, st.kind)
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
                pass  # the server is gone: the backend may still read the sandbox's files
        return await self._read_elsewhere(path)

    async def write_file(self, path: str, data: bytes, mode: Optional[int] = None) -> None:
        path, st = await self.resolve(path)  # write where a symlink points, as open() would
        if st is not None and not st.is_file:
            raise not_a_file(path, st.kind)
        if len(data) <= self.spec.fast_file_max_bytes and self._channel_free():
            try:
                await self._request(protocol.WRITE, CHANNEL_GRACE_S, path=path,
                                    data=base64.b64encode(data).decode("ascii"), mode=0o644 if mode is None else mode)
                return
            except ServerError as e:
                raise SandboxFileError(f"cannot write {path}: {e.message}") from None
        await self._write_elsewhere(path, data, 0o644 if mode is None else mode)

    # ------------------------------------------------------------------ copy-back
    async def copy_out(self, container_dir: str, host_dir: Path, limits: Optional[CopyLimits] = None) -> CopyResult:
        """File by file: the server lists the folder (never following links), the budget picks what
        fits, small files come in batches through the server and big ones one by one the backend's
        way. Without the server (busy or gone) the backend copies the folder its own way, by the same
        rules. The listing is asked for within the budget's bounds (one entry more than the limit, to
        know there are more) and a reply past them is refused: the server is in the sandbox."""
        host_dir = Path(host_dir)
        host_dir.mkdir(parents=True, exist_ok=True)
        budget = CopyBudget(limits)
        root = container_dir.rstrip("/") or "/"
        listing = None
        if self._channel_free():
            lim = budget.limits
            try:
                asked = None if lim.max_entries is None else lim.max_entries + 1
                listing = listed_entries(await self._request(
                    protocol.LIST_TREE, CHANNEL_GRACE_S, path=root, max_entries=asked,
                    max_bytes=lim.max_listing_bytes, reply_limit=lim.max_listing_bytes + LIST_REPLY_SLACK_BYTES),
                    asked)
            except (SandboxError, OperationError):
                listing = None
        if listing is None:
            files = await self._copy_elsewhere(root, host_dir, budget)
        else:
            files = await self._copy_listed(root, listing, host_dir, budget)
        return CopyResult(files, budget.skipped)

    async def _copy_listed(self, root: str, listing: tuple[list[Entry], bool], dest: Path,
                           budget: CopyBudget) -> list[str]:
        entries, truncated = listing
        small, big, links = [], [], []
        for e, target, d in budget.admitted(entries, dest):
            if d.action == "copy":
                (small if e.size <= self.spec.fast_file_max_bytes else big).append((e, target))
            elif d.action == "link":
                links.append((d.source, e))
        if truncated:  # short of the entries asked for (else the budget stopped at the one past its limit)
            budget.stop_listing()
        written: list[str] = []
        for batch in batches(small, READ_BATCH_BYTES):
            reply = await self._request(protocol.READ_MANY, CHANNEL_GRACE_S, files=[
                {"path": f"{root}/{e.path}", "max_bytes": max(e.size, self.spec.fast_file_max_bytes)}
                for e, _ in batch])
            for (e, target), item in zip(batch, reply["files"], strict=True):
                if "error" in item:
                    budget.skip(e.path, f"not copied: {item['error']}", e.size)
                    continue
                data = base64.b64decode(item["data"])
                room = budget.room(e)
                if len(data) > max(e.size, self.spec.fast_file_max_bytes) or (room is not None and len(data) > room):
                    budget.skip(e.path, f"grew to {human_size(len(data))} while copying, past the limits", e.size)
                    continue
                try:
                    hostfiles.write_bytes(target, data)
                except OSError as err:
                    budget.skip(e.path, f"not written on the host: {err.strerror}", e.size)
                    continue
                budget.wrote(e, len(data))
                written.append(e.path)
        for e, target in big:
            why = await self._fetch_elsewhere(f"{root}/{e.path}", target, budget.room(e))
            if why:
                budget.skip(e.path, why, e.size)
            else:
                budget.wrote(e, target.stat().st_size)
                written.append(e.path)
        copied = set(written)
        for first, e in links:
            if first in copied and link_or_copy(dest, first, e.path):
                written.append(e.path)
            else:
                budget.skip(e.path, f"hard link to {first!r}, which was not copied", e.size)
        return written


def listed_entries(reply: dict, max_entries: Optional[int]) -> Optional[tuple[list[Entry], bool]]:
    """The entries of a listing's reply (no more than were asked for) and whether the server stopped
    early, or None when the reply is not a listing (then the backend walks the folder its own way)."""
    raw, truncated = reply.get("entries"), reply.get("truncated")
    if not isinstance(raw, list) or not isinstance(truncated, bool):
        return None
    if max_entries is not None and len(raw) > max_entries:  # the server is not trusted to keep the bound
        raw, truncated = raw[:max_entries], True
    out = []
    for item in raw:
        try:
            key = item.get("link_key")
            out.append(Entry(str(item["path"]), str(item["kind"]), max(0, int(item.get("size") or 0)),
                             (int(key[0]), int(key[1])) if key else None, str(item.get("target", ""))))
        except (AttributeError, KeyError, TypeError, ValueError, IndexError):
            return None
    return out, truncated


def batches(items: list, max_bytes: int) -> list[list]:
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
