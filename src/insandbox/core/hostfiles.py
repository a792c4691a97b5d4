"""Writing files into folders on the host that someone else may have prepared.

A run folder given with --output-dir, a benchmark folder resumed, a branch folder of a fork: any of
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
