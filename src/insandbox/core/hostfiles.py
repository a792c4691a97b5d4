"""Writing files into folders on the host that someone else may have prepared.

A run folder given with --out, a benchmark folder resumed, a branch folder of a fork: any of
them may hold a symbolic link where insandbox is about to write (`files/notes.txt -> ~/.bashrc`).
Every write insandbox makes there opens its file with O_NOFOLLOW, so a link in the last place is an
error instead of a write through it; `no_link_on_the_way` checks the folders between.
"""
from __future__ import annotations

import os
from pathlib import Path

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def open_for_writing(path: os.PathLike, append: bool = False, mode: int = 0o644) -> int:
    """A descriptor for writing `path` (created, truncated unless append), never through a link."""
    flags = os.O_WRONLY | os.O_CREAT | NOFOLLOW | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
    try:
        return os.open(path, flags, mode)
    except OSError as e:
        if os.path.islink(path):
            raise OSError(e.errno, f"{path} is a symbolic link: insandbox does not write through links") from None
        raise


def write_bytes(path: os.PathLike, data: bytes, mode: int = 0o644) -> None:
    fd = open_for_writing(path, mode=mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def write_text(path: os.PathLike, text: str, errors: str = "strict") -> None:
    write_bytes(path, text.encode("utf-8", errors))


def no_link_on_the_way(root: Path, target: Path) -> bool:
    """Whether nothing between root (trusted) and target (inclusive) is a symbolic link."""
    try:
        rel = Path(target).relative_to(root)
    except ValueError:
        return False
    cur = Path(root)
    for part in rel.parts:
        cur = cur / part
        if cur.is_symlink():
            return False
    return True


def cannot_create(folder: os.PathLike) -> str | None:
    """Why `folder` (made with its parents when missing) cannot be written here, or None when it can: its
    nearest existing folder is read-only (a read-only mount counts, also for root), or something on the way
    is a file. Checked before anything starts, so nothing is created when it cannot be written."""
    path = Path(os.path.abspath(folder))
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        why = "a read-only file system" if _read_only_mount(probe) else "not writable by this user"
        return f"{probe} is {why}"
    return None


def _read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False
