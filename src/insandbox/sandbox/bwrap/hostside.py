"""A bwrap sandbox's files from the host side: what the in-sandbox server does not do (big files, copy-in
of folders, and anything while the server is busy with a command the caller gave up on, or gone).

At start the backend opens the sandbox's root (`/proc/<its init>/root`, its overlay as the sandbox
sees it) and keeps that descriptor: every path is then looked up with openat2(RESOLVE_IN_ROOT |
RESOLVE_NO_MAGICLINKS), so `..` and absolute symlinks stay inside the sandbox's root exactly as they
do for its own processes, and no /proc magic link can lead out. Below a folder being copied nothing
is followed at all (O_NOFOLLOW, folder by folder, as sandbox/docker/recycle.py walks). Only regular
files are opened for reading or writing (looked at through O_PATH first, then reopened), so a FIFO
or a device never blocks or touches anything. The descriptor also keeps the overlay mounted after
the sandbox's last process is gone, so a dead sandbox's outputs still come back.
"""
from __future__ import annotations

import asyncio
import bisect
import ctypes
import errno
import os
import posixpath
import stat
from pathlib import Path
from typing import Optional

from ...core import hostfiles
from ..base import DIRECTORY, FILE, SYMLINK, FileStat, SandboxError, SandboxFileError
from ..copyback import CopyBudget, Entry, human_size, link_or_copy
from ..serverfiles import ServerFiles, not_a_file

SYS_OPENAT2 = 437  # the same number on every architecture (it came after the syscall tables were unified)
RESOLVE_NO_MAGICLINKS, RESOLVE_IN_ROOT = 0x02, 0x10
RESOLVE = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS
O_PATH = getattr(os, "O_PATH", 0o10000000)
CHUNK = 1 << 20

_libc = ctypes.CDLL(None, use_errno=True)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def openat2(dirfd: int, path: str, flags: int, mode: int = 0, resolve: int = RESOLVE) -> int:
    how = _OpenHow(flags | os.O_CLOEXEC, mode, resolve)
    fd = _libc.syscall(SYS_OPENAT2, dirfd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return fd


def why_unavailable() -> str:
    """Why openat2 cannot be used here ("" when it can)."""
    try:
        os.close(openat2(os.open("/", O_PATH), ".", O_PATH))
        return ""
    except OSError as e:
        return f"openat2 is not available ({e.strerror}; it needs Linux 5.6 or newer)"


def kind(mode: int) -> str:
    from ..base import BLOCK_DEVICE, CHAR_DEVICE, FIFO, SOCKET

    for test, name in ((stat.S_ISREG, FILE), (stat.S_ISDIR, DIRECTORY), (stat.S_ISLNK, SYMLINK),
                       (stat.S_ISFIFO, FIFO), (stat.S_ISSOCK, SOCKET), (stat.S_ISCHR, CHAR_DEVICE),
                       (stat.S_ISBLK, BLOCK_DEVICE)):
        if test(mode):
            return name
    return "special file"


def _reopen(fd: int, flags: int) -> int:
    """A real descriptor for what an O_PATH one names (only after checking it is a regular file)."""
    return os.open(f"/proc/self/fd/{fd}", flags | os.O_CLOEXEC | os.O_NOCTTY)


def _regular(root: int, path: str, follow: bool) -> int:
    """A descriptor for reading the regular file at path; SandboxFileError for anything else."""
    try:
        pfd = openat2(root, path, O_PATH | (0 if follow else os.O_NOFOLLOW))
    except OSError as e:
        raise SandboxFileError(f"{path}: {os.strerror(e.errno)}") from None
    try:
        st = os.fstat(pfd)
        if not stat.S_ISREG(st.st_mode):
            raise not_a_file(path, kind(st.st_mode))
        return _reopen(pfd, os.O_RDONLY)
    finally:
        os.close(pfd)


def _dir(root: int, path: str, create: bool = False) -> int:
    """An O_PATH descriptor of the folder at path (symlinks followed inside the root), made when asked."""
    try:
        return openat2(root, path, O_PATH | os.O_DIRECTORY)
    except OSError as e:
        if e.errno != errno.ENOENT or not create:
            raise
    parts = [p for p in path.split("/") if p]
    fd = os.dup(root)
    for i, part in enumerate(parts):
        try:
            nxt = openat2(root, "/" + "/".join(parts[: i + 1]), O_PATH | os.O_DIRECTORY)
        except OSError as e:
            if e.errno != errno.ENOENT:
                os.close(fd)
                raise
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            nxt = openat2(root, "/" + "/".join(parts[: i + 1]), O_PATH | os.O_DIRECTORY)
        os.close(fd)
        fd = nxt
    return fd


def _create(dirfd: int, name: str, mode: int) -> int:
    """A descriptor for writing the regular file `name` in the folder (created; never through a link,
    never a FIFO or a device)."""
    try:
        pfd = os.open(name, O_PATH | os.O_NOFOLLOW, dir_fd=dirfd)
    except FileNotFoundError:
        pfd = None
    if pfd is not None:
        try:
            st = os.fstat(pfd)
            if not stat.S_ISREG(st.st_mode):
                raise not_a_file(name, kind(st.st_mode))
        finally:
            os.close(pfd)
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, mode,
                 dir_fd=dirfd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced in between
        os.close(fd)
        raise SandboxFileError(f"{name} is not a regular file")
    os.ftruncate(fd, 0)
    os.fchmod(fd, mode)
    return fd


def _copy_fd(src: int, dst: int, max_bytes: Optional[int] = None) -> int:
    """Bytes from one descriptor to the other; stops after max_bytes + 1. Returns how many."""
    total = 0
    while max_bytes is None or total <= max_bytes:
        want = CHUNK if max_bytes is None else min(CHUNK, max_bytes + 1 - total)
        data = os.read(src, want)
        if not data:
            break
        view = memoryview(data)
        while view:
            view = view[os.write(dst, view):]
        total += len(data)
    return total


class HostSideFiles(ServerFiles):
    """The file half of BwrapSandbox (it provides _root_fd(), spec, exec, _request, _channel_free)."""

    def _root(self) -> int:
        fd = self._root_fd()
        if fd is None:
            raise SandboxError("the sandbox is not started")
        return fd

    # ------------------------------------------------------------------ single paths
    async def _stat_elsewhere(self, path: str) -> Optional[FileStat]:
        return await asyncio.to_thread(self._lstat, path)

    def _lstat(self, path: str) -> Optional[FileStat]:
        try:
            fd = openat2(self._root(), path, O_PATH | os.O_NOFOLLOW)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ENOTDIR):
                return None
            raise SandboxFileError(f"{path}: {os.strerror(e.errno)}") from None
        try:
            st = os.fstat(fd)
            target = os.readlink("", dir_fd=fd) if stat.S_ISLNK(st.st_mode) else ""
        finally:
            os.close(fd)
        return FileStat(name=posixpath.basename(path.rstrip("/")) or "/", size=st.st_size, mode=st.st_mode & 0o7777,
                        kind=kind(st.st_mode), link_target=target)

    async def _read_elsewhere(self, path: str) -> bytes:
        def read() -> bytes:
            fd = _regular(self._root(), path, follow=True)
            try:
                chunks = []
                while chunk := os.read(fd, CHUNK):
                    chunks.append(chunk)
                return b"".join(chunks)
            finally:
                os.close(fd)

        return await asyncio.to_thread(read)

    async def _write_elsewhere(self, path: str, data: bytes, mode: int) -> None:
        def write() -> None:
            parent, name = posixpath.split(posixpath.normpath(path))
            try:
                dirfd = _dir(self._root(), parent or "/", create=True)
            except OSError as e:
                raise SandboxFileError(f"cannot create directory {parent}: {os.strerror(e.errno)}") from None
            try:
                fd = _create(dirfd, name, mode)
            except OSError as e:
                raise SandboxFileError(f"cannot write {path}: {os.strerror(e.errno)}") from None
            finally:
                os.close(dirfd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view[:CHUNK]):]
            except OSError as e:  # e.g. the file size limit
                raise SandboxFileError(f"cannot write {path}: {os.strerror(e.errno)}") from None
            finally:
                os.close(fd)

        await asyncio.to_thread(write)

    # ------------------------------------------------------------------ copy in
    async def copy_in(self, host_path: Path, container_dir: str) -> None:
        await asyncio.to_thread(self._copy_in, Path(host_path), container_dir)

    def _copy_in(self, src: Path, container_dir: str) -> None:
        top = _dir(self._root(), container_dir, create=True)
        try:
            if src.is_dir():
                self._copy_tree_in(src, top)
            else:
                self._copy_file_in(src, top, src.name)
        finally:
            os.close(top)

    def _copy_tree_in(self, src: Path, dirfd: int) -> None:
        for child in sorted(src.iterdir()):
            st = child.lstat()
            if stat.S_ISLNK(st.st_mode):
                try:
                    os.symlink(os.readlink(child), child.name, dir_fd=dirfd)
                except FileExistsError:
                    pass
            elif stat.S_ISDIR(st.st_mode):
                try:
                    os.mkdir(child.name, st.st_mode & 0o777 | 0o700, dir_fd=dirfd)
                except FileExistsError:
                    pass
                sub = os.open(child.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
                try:
                    self._copy_tree_in(child, sub)
                finally:
                    os.close(sub)
            elif stat.S_ISREG(st.st_mode):
                self._copy_file_in(child, dirfd, child.name)

    def _copy_file_in(self, src: Path, dirfd: int, name: str) -> None:
        out = _create(dirfd, name, src.stat().st_mode & 0o777)
        try:
            with open(src, "rb") as f:
                _copy_fd(f.fileno(), out)
        finally:
            os.close(out)

    async def copy_in_files(self, files: dict[str, bytes], container_dir: str) -> None:
        def place() -> None:
            for name, data in files.items():
                parent, base = posixpath.split(posixpath.normpath(f"{container_dir}/{name.lstrip('/')}"))
                dirfd = _dir(self._root(), parent, create=True)
                try:
                    fd = _create(dirfd, base, 0o644)
                finally:
                    os.close(dirfd)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view[:CHUNK]):]
                finally:
                    os.close(fd)

        await asyncio.to_thread(place)

    # ------------------------------------------------------------------ copy-back
    async def _fetch_elsewhere(self, path: str, target: Path, max_bytes: Optional[int]) -> Optional[str]:
        def fetch() -> Optional[str]:
            try:
                fd = _regular(self._root(), path, follow=False)
            except SandboxFileError as e:
                return f"vanished or changed while copying ({e})"
            try:
                return _fetch_fd(fd, target, max_bytes)
            finally:
                os.close(fd)

        return await asyncio.to_thread(fetch)

    async def _copy_elsewhere(self, root: str, dest: Path, budget: CopyBudget) -> list[str]:
        return await asyncio.to_thread(self._copy_walk, root, dest, budget)

    def _copy_walk(self, root: str, dest: Path, budget: CopyBudget) -> list[str]:
        """The server's listing and fetching, done here: every entry under root, links never followed.
        A folder waits its turn as its path below root and is opened when it comes (beneath root,
        through no link at all), so the walk holds two descriptors whatever the folder holds; of a
        folder's names no more are read than the budget has room for."""
        try:
            top = openat2(self._root(), root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return []
        written: list[str] = []
        copied: set[str] = set()
        links: list[tuple[str, Entry]] = []
        todo = [""]
        try:
            while todo and not budget.stopped:
                rel = todo.pop()
                try:
                    dirfd = openat2(top, rel, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                                    resolve=_WALK_RESOLVE) if rel else os.dup(top)
                except OSError as err:
                    budget.skip(rel, f"folder not walked: {err.strerror}")
                    continue
                try:
                    for name in _first_names(dirfd, budget):
                        sub = f"{rel}/{name}" if rel else name
                        try:
                            st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                            target = os.readlink(name, dir_fd=dirfd) if stat.S_ISLNK(st.st_mode) else ""
                        except OSError:
                            continue
                        key = (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 else None
                        e = Entry(sub, kind(st.st_mode), st.st_size, key, target)
                        if not budget.admit(e):
                            break
                        out = budget.place(dest, e)
                        if out is None:
                            continue
                        d = budget.decide(e)
                        if d.action == "dir":
                            try:
                                out.mkdir(exist_ok=True)
                            except OSError as err:
                                budget.skip(e.path, f"not made on the host: {err.strerror}")
                                continue
                            todo.append(sub)
                        elif d.action == "copy":
                            why = self._fetch_in(dirfd, name, out, budget.room(e))
                            if why:
                                budget.skip(e.path, why, e.size)
                            else:
                                budget.wrote(e, out.stat().st_size)
                                written.append(e.path)
                                copied.add(e.path)
                        elif d.action == "link":
                            links.append((d.source, e))
                finally:
                    os.close(dirfd)
        finally:
            os.close(top)
        for first, e in links:
            if first in copied and link_or_copy(dest, first, e.path):
                written.append(e.path)
            else:
                budget.skip(e.path, f"hard link to {first!r}, which was not copied", e.size)
        return written

    @staticmethod
    def _fetch_in(dirfd: int, name: str, target: Path, max_bytes: Optional[int]) -> Optional[str]:
        try:
            pfd = os.open(name, O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
        except OSError:
            return "vanished while copying"
        try:
            if not stat.S_ISREG(os.fstat(pfd).st_mode):
                return "changed while copying: no longer a regular file"
            fd = _reopen(pfd, os.O_RDONLY)
        finally:
            os.close(pfd)
        try:
            return _fetch_fd(fd, target, max_bytes)
        finally:
            os.close(fd)


_WALK_RESOLVE = 0x08 | 0x04 | RESOLVE_NO_MAGICLINKS  # RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS: below root, no link
_LEAST_ENTRY_BYTES = 40  # an entry's listing beyond its name, at the least (copyback.listed_bytes)


def _first_names(dirfd: int, budget: CopyBudget) -> list[str]:
    """The head of a folder's sorted names: as many as the budget can still admit, and one more (so that
    it sees there were more), held in memory no larger however many names the folder holds."""
    lim = budget.limits
    most = None if lim.max_entries is None else lim.max_entries - budget.entries + 1
    room = lim.max_listing_bytes - budget.listing_bytes
    names: list[str] = []
    cost = 0  # of the names kept, at the least they take in the listing
    with os.scandir(dirfd) as it:
        for entry in it:
            bisect.insort(names, entry.name)
            cost += len(entry.name) + _LEAST_ENTRY_BYTES
            while len(names) > 1 and ((most is not None and len(names) > most)
                                      or cost - len(names[-1]) - _LEAST_ENTRY_BYTES > room):
                cost -= len(names.pop()) + _LEAST_ENTRY_BYTES
    return names


def _fetch_fd(fd: int, target: Path, max_bytes: Optional[int]) -> Optional[str]:
    """A file's bytes into target on the host; returns why not, or None."""
    size = os.fstat(fd).st_size
    if max_bytes is not None and size > max_bytes:
        return f"grew to {human_size(size)} while copying, over the per-file limit"
    target.parent.mkdir(parents=True, exist_ok=True)
    out = hostfiles.open_for_writing(target)
    try:
        n = _copy_fd(fd, out, max_bytes)
    finally:
        os.close(out)
    if max_bytes is not None and n > max_bytes:
        os.unlink(target)
        return "grew while copying, over the per-file limit"
    return None
