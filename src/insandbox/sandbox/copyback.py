"""Which entries of a sandbox's output folder come back to the host, and where they land.

Files come back one by one, so one bad entry never costs the others: regular files are
copied while they fit the limits (per file, in all, number of files); a second name of a
hard-linked file is linked (or copied) on the host too; symbolic links are never followed
(the sandbox is not trusted and a link may point at anything); FIFOs, sockets and devices
are not files. Every entry left behind is listed with the reason. A backend applies the
same `CopyBudget` whichever way it fetches the bytes.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..core import hostfiles
from .base import DIRECTORY, FILE, SYMLINK, CopyLimits, Skipped


@dataclass
class Entry:
    """One entry under the folder being copied, as the sandbox reports it (never following links)."""

    path: str  # relative, "/"-separated; undecodable bytes as surrogate escapes
    kind: str  # FILE, DIRECTORY, SYMLINK, FIFO, ... (see base.py)
    size: int = 0
    link_key: Optional[tuple] = None  # (device, inode) of a regular file that has several names
    target: str = ""  # where a symlink points


@dataclass
class Decision:
    action: str  # "dir", "copy", "link" (a second name of a file already copied) or "skip"
    reason: str = ""  # why it is skipped
    source: str = ""  # for "link": the first name, already copied


def human_size(n: Optional[int]) -> str:
    if n is None:
        return "?"
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} bytes"


class CopyBudget:
    """Decides entry by entry, in the order they come, and keeps the running totals."""

    def __init__(self, limits: Optional[CopyLimits] = None):
        self.limits = limits or CopyLimits()
        self.total_bytes = 0
        self.files = 0
        self.copied_links: dict[tuple, str] = {}  # link_key -> the first name copied
        self.skipped: list[Skipped] = []

    def decide(self, e: Entry) -> Decision:
        lim = self.limits
        if e.kind == DIRECTORY:
            return Decision("dir")
        if e.kind == SYMLINK:
            return self._skip(e, f"symbolic link to {e.target!r} (links are not followed)")
        if e.kind != FILE:
            return self._skip(e, f"{e.kind}, not a regular file")
        if lim.max_files is not None and self.files >= lim.max_files:
            return self._skip(e, f"over the limit of {lim.max_files:,} files")
        if e.link_key is not None and e.link_key in self.copied_links:
            self.files += 1
            return Decision("link", source=self.copied_links[e.link_key])
        if lim.max_file_bytes is not None and e.size > lim.max_file_bytes:
            return self._skip(e, f"too big: {human_size(e.size)}, over the per-file limit of "
                                 f"{human_size(lim.max_file_bytes)}")
        if lim.max_total_bytes is not None and self.total_bytes + e.size > lim.max_total_bytes:
            return self._skip(e, f"{human_size(e.size)} would pass the total limit of "
                                 f"{human_size(lim.max_total_bytes)}")
        self.total_bytes += e.size
        self.files += 1
        if e.link_key is not None:
            self.copied_links[e.link_key] = e.path
        return Decision("copy")

    def _skip(self, e: Entry, reason: str) -> Decision:
        self.skipped.append(Skipped(e.path, reason, e.size if e.kind == FILE else None))
        return Decision("skip", reason)

    def skip(self, path: str, reason: str, size: Optional[int] = None) -> None:
        """An entry that was meant to be copied but could not be (changed or vanished meanwhile)."""
        self.skipped.append(Skipped(path, reason, size))


def host_path(dest: Path, rel: str) -> Optional[Path]:
    """Where `rel` lands under dest, or None when it would land anywhere else."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    target = dest.joinpath(*parts)
    # the folders on the way were made by us, but a folder given as dest may hold anything
    if not hostfiles.no_link_on_the_way(dest, target) or not target.parent.resolve().is_relative_to(dest.resolve()):
        return None
    return target


def link_or_copy(dest: Path, first: str, second: str) -> bool:
    """Give the file copied as `first` its second name as well (a hard link, else a copy)."""
    src, dst = host_path(dest, first), host_path(dest, second)
    if src is None or dst is None or not src.is_file():
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
    return True
