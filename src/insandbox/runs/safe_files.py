"""A run folder read and written as data: whoever made it may have planted links in it.

Replay and fork take run folders that someone else may have written. Everything they read in one
is opened here component by component from a folder the user named, with O_NOFOLLOW through
directory descriptors, so no symbolic link (out of the folder or within it) is followed, a FIFO
or device is never opened as a file, and nothing is read past a size cap. The folders a fork
writes are made the same way: an existing link on the way is refused, never written through.

The folder the user named is the trusted root: links in the path they typed are theirs, except
the run folder itself, which must be a real folder (`follow_root=False`).
"""
from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..core.errors import DataError

MIB = 1024 ** 2
TRAJECTORY_MAX_BYTES = 512 * MIB
INPUT_FILE_MAX_BYTES = 1024 * MIB
SMALL_FILE_MAX_BYTES = 16 * MIB  # bench.json

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: opening a FIFO never waits


class UnsafeRunFolder(DataError):
    """Something in a run folder that insandbox will not follow, open or write through; one line."""


def parts_of(rel: str) -> list[str]:
    """The components of a "/"-separated relative path; UnsafeRunFolder for "..", or nothing at all."""
    parts = [p for p in str(rel).split("/") if p not in ("", ".")]
    if not parts or ".." in parts or any("\0" in p for p in parts):
        raise UnsafeRunFolder(f"{rel!r}: not a path inside the run folder")
    return parts


def _kind(dir_fd: int, name: str) -> str:
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except OSError:
        return "missing"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "a file" if stat.S_ISREG(mode) else "a special file (FIFO, socket or device)"


def _refuse(shown: Path, what: str) -> UnsafeRunFolder:
    return UnsafeRunFolder(f"{shown} is {what}: insandbox never follows a link in a run folder, nor opens "
                           "anything there but plain files and folders")


def _open_root(root: Path, follow_root: bool) -> int:
    flags = _DIR if not follow_root else _DIR & ~os.O_NOFOLLOW
    try:
        return os.open(os.fspath(root), flags)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(root):
            raise _refuse(root, "a symbolic link") from None
        if e.errno == errno.ENOENT:
            raise FileNotFoundError(errno.ENOENT, "no such folder", os.fspath(root)) from None
        if e.errno == errno.ENOTDIR:
            raise UnsafeRunFolder(f"{root} is not a folder") from None
        raise


def _open_dir(dir_fd: int, name: str, shown: Path) -> int:
    try:
        return os.open(name, _DIR, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO):
            kind = _kind(dir_fd, name)
            raise _refuse(shown, kind) if kind != "a file" else UnsafeRunFolder(f"{shown} is a file, not a "
                                                                                 "folder") from None
        if e.errno == errno.ENOENT:
            raise FileNotFoundError(errno.ENOENT, "no such folder", os.fspath(shown)) from None
        raise


@contextmanager
def _walk(root: Path, dirs: list[str], follow_root: bool) -> Iterator[int]:
    """A descriptor of root/dirs..., every component opened without following a link."""
    fd = _open_root(root, follow_root)
    try:
        shown = Path(root)
        for name in dirs:
            shown = shown / name
            nxt = _open_dir(fd, name, shown)
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def read_file(root: Path, rel: str, max_bytes: int, *, follow_root: bool = False) -> bytes:
    """The bytes of the plain file root/rel. FileNotFoundError when it is not there; UnsafeRunFolder
    when it (or a folder on the way) is a link or not a plain file, or holds more than max_bytes."""
    parts = parts_of(rel)
    shown = Path(root).joinpath(*parts)
    with _walk(Path(root), parts[:-1], follow_root) as dir_fd:
        kind = _kind(dir_fd, parts[-1])
        if kind == "missing":
            raise FileNotFoundError(errno.ENOENT, "no such file", os.fspath(shown))
        if kind != "a file":  # a device or FIFO is not even opened
            raise _refuse(shown, kind)
        try:
            fd = os.open(parts[-1], _FILE, dir_fd=dir_fd)
        except OSError as e:
            if e.errno == errno.ENOENT:
                raise FileNotFoundError(errno.ENOENT, "no such file", os.fspath(shown)) from None
            if e.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                raise _refuse(shown, _kind(dir_fd, parts[-1])) from None
            raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(shown, "a folder" if stat.S_ISDIR(st.st_mode) else "a special file (FIFO, socket or "
                          "device)")
        if st.st_size > max_bytes:
            raise UnsafeRunFolder(f"{shown} holds {st.st_size:,} bytes, more than the {max_bytes:,} insandbox "
                                  "reads from a run folder")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:  # grew while read
        raise UnsafeRunFolder(f"{shown} holds more than the {max_bytes:,} bytes insandbox reads from a run folder")
    return data


def check_new_folder(root: Path, rel: str, *, follow_root: bool = False) -> None:
    """Whether new_folder(root, rel) can make rel (nothing is created): every part that exists is a
    real folder, and the last one, if it exists, is empty. UnsafeRunFolder if not."""
    _folder(Path(root), parts_of(rel), follow_root, create=False)


def new_folder(root: Path, rel: str, *, follow_root: bool = False) -> Path:
    """Make root/rel folder by folder without following links (root itself must exist) and return
    its path: every part that exists must be a real folder, the last one new or empty."""
    parts = parts_of(rel)
    _folder(Path(root), parts, follow_root, create=True)
    return Path(root).joinpath(*parts)


def _folder(root: Path, parts: list[str], follow_root: bool, create: bool) -> None:
    try:
        fd = _open_root(root, follow_root)
    except FileNotFoundError:
        if create:
            raise
        return  # nothing there yet: nothing in the way
    try:
        shown = root
        for i, name in enumerate(parts):
            shown = shown / name
            if create:
                try:
                    os.mkdir(name, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass  # opened below without following: a link there is refused
            try:
                nxt = _open_dir(fd, name, shown)
            except FileNotFoundError:
                return  # check only: the rest does not exist yet
            os.close(fd)
            fd = nxt
            if i == len(parts) - 1 and os.listdir(fd):
                raise UnsafeRunFolder(f"{shown} already exists and is not empty: remove it or choose another "
                                      "folder")
    finally:
        os.close(fd)
