"""Which entries of a sandbox's output folder come back to the host, and where they land.

Files come back one by one, so one bad entry never costs the others: regular files are
copied while they fit the limits (per file, in all); a second name of a hard-linked file is
linked (or copied) on the host too; symbolic links are never followed (the sandbox is not
trusted and a link may point at anything); FIFOs, sockets and devices are not files. A backend
applies the same `CopyBudget` whichever way it fetches the bytes.

What one copy-back costs the host is bounded whatever the folder holds: every entry (a folder,
a link, a FIFO as much as a file) counts against `max_entries` and its listing against
`max_listing_bytes` (long paths, long link targets), and past either the rest is not looked at;
a folder made on the host on the way to an entry that was not listed counts as one too. The
record of what was left behind is bounded as well: the first SKIPPED_KEPT entries one by one
(long paths and reasons clipped), then how many more, by reason.
"""
from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..core import hostfiles
from .base import DIRECTORY, FILE, SYMLINK, CopyLimits, Skipped

SKIPPED_KEPT = 200  # entries left behind that are recorded one by one
SKIPPED_PATH_CHARS = 256  # a longer path is recorded as its head and its tail
SKIPPED_REASON_CHARS = 320
CLIPPED_TAIL_CHARS = 64
# why an entry was left behind, as counted past SKIPPED_KEPT
LINK = "symbolic links (not followed)"
SPECIAL = "FIFOs, sockets, devices and other entries that are not regular files"
TOO_BIG = "files over the per-file limit"
PAST_TOTAL = "files that would pass the total limit"
OUTSIDE = "paths that lead outside the output folder"
NOT_COPIED = "files that could not be copied (changed, vanished or unreadable)"


@dataclass
class Entry:
    """One entry under the folder being copied, as the sandbox reports it (never following links)."""

    path: str  # relative, "/"-separated; undecodable bytes as surrogate escapes
    kind: str  # FILE, DIRECTORY, SYMLINK, FIFO, ... (see base.py)
    size: int = 0
    link_key: Optional[tuple] = None  # (device, inode) of a regular file that has several names
    target: str = ""  # where a symlink points


def listed_bytes(e: Entry) -> int:
    """What the entry takes in a listing: its JSON as the sandbox's server writes it (guest/server.py
    list_tree) and a separator, so the listing bound is the same whichever way the folder is walked."""
    item: dict = {"path": e.path, "kind": e.kind, "size": e.size}
    if e.link_key is not None:
        item["link_key"] = list(e.link_key)
    elif e.kind == SYMLINK:
        item["target"] = e.target
    return len(json.dumps(item)) + 2


def clip(text: str, limit: int) -> str:
    """text, or its head and tail with an ellipsis between when longer than limit characters."""
    if len(text) <= limit:
        return text
    return text[:limit - CLIPPED_TAIL_CHARS - 1] + "\u2026" + text[-CLIPPED_TAIL_CHARS:]


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
    """Decides entry by entry, in the order they come, and keeps the running totals. A walker calls
    `admit` for every entry it meets and stops at the first False; then `place` and `decide`."""

    def __init__(self, limits: Optional[CopyLimits] = None):
        self.limits = limits or CopyLimits()
        self.total_bytes = 0
        self.entries = 0  # admitted: looked at
        self.listing_bytes = 0  # their listing's size (listed_bytes)
        self.copied_links: dict[tuple, str] = {}  # link_key -> the first name copied
        self._kept: list[Skipped] = []
        self._more: dict[str, int] = {}  # left behind past SKIPPED_KEPT: how many, by why
        self._stop: Optional[Skipped] = None  # why the rest of the folder was not looked at

    # ------------------------------------------------------------------ the walk's bounds
    def admit(self, e: Entry) -> bool:
        """Count the entry against the bounds on entries and on the listing; False (and the walk
        stops) once it would pass one."""
        if self._stop is not None:
            return False
        lim, size = self.limits, listed_bytes(e)
        if lim.max_entries is not None and self.entries >= lim.max_entries:
            self.stop(f"the folder holds more than {lim.max_entries:,} entries (folders, links and other "
                      "entries count as files do); the rest were not looked at")
            return False
        if self.listing_bytes + size > lim.max_listing_bytes:
            self.stop_listing()
            return False
        self.entries += 1
        self.listing_bytes += size
        return True

    def stop_listing(self) -> None:
        """The listing reached its bound in bytes (here, or in the sandbox's server)."""
        self.stop(f"its listing passed {human_size(self.limits.max_listing_bytes)} (long paths or link targets) "
                  f"after {self.entries:,} entries; the rest were not looked at")

    def stop(self, reason: str) -> None:
        """The rest of the folder is not looked at (the first reason given is kept)."""
        if self._stop is None:
            self._stop = Skipped("...", reason)

    @property
    def stopped(self) -> bool:
        return self._stop is not None

    def place(self, dest: Path, e: Entry) -> Optional[Path]:
        """Where the entry lands under dest, its folders made, or None (recorded) when it would land
        elsewhere. A folder on the way that was not listed before it counts as an entry too, so the
        host holds no more entries than were admitted."""
        try:
            target = host_path(dest, e.path)
            if target is None:
                self.skip(e.path, "its path leads outside the output folder", why=OUTSIDE)
                return None
            missing, folder = [], target.parent
            while folder != dest and not folder.is_dir():
                missing.append(folder)
                folder = folder.parent
            for folder in reversed(missing):
                if not self.admit(Entry(folder.relative_to(dest).as_posix(), DIRECTORY)):
                    return None
                folder.mkdir()
        except OSError as err:  # e.g. a path longer than the host allows below dest
            self.skip(e.path, f"cannot be placed on the host: {err.strerror}", why=NOT_COPIED)
            return None
        return target

    # ------------------------------------------------------------------ entry by entry
    def admitted(self, entries: list[Entry], dest: Path) -> Iterator[tuple[Entry, Path, Decision]]:
        """A listing's entries within the limits, in order, each with its place under `dest` and what to do
        with it (copy, link); folders are made here (one that cannot be made is skipped, recorded)."""
        for e in entries:
            if not self.admit(e):
                return
            target = self.place(dest, e)
            if target is None:
                continue
            d = self.decide(e)
            if d.action == "dir":
                try:
                    target.mkdir(exist_ok=True)
                except OSError as err:
                    self.skip(e.path, f"not made on the host: {err.strerror}")
            else:
                yield e, target, d

    def decide(self, e: Entry) -> Decision:
        lim = self.limits
        if e.kind == DIRECTORY:
            return Decision("dir")
        if e.kind == SYMLINK:
            return self._skip(e, f"symbolic link to {e.target!r} (links are not followed)", LINK)
        if e.kind != FILE:
            return self._skip(e, f"{e.kind}, not a regular file", SPECIAL)
        if e.link_key is not None and e.link_key in self.copied_links:
            return Decision("link", source=self.copied_links[e.link_key])
        if lim.max_file_bytes is not None and e.size > lim.max_file_bytes:
            return self._skip(e, f"too big: {human_size(e.size)}, over the per-file limit of "
                                 f"{human_size(lim.max_file_bytes)}", TOO_BIG)
        if lim.max_total_bytes is not None and self.total_bytes + e.size > lim.max_total_bytes:
            return self._skip(e, f"{human_size(e.size)} would pass the total limit of "
                                 f"{human_size(lim.max_total_bytes)}", PAST_TOTAL)
        self.total_bytes += e.size
        if e.link_key is not None:
            self.copied_links[e.link_key] = e.path
        return Decision("copy")

    def room(self, e: Entry) -> Optional[int]:
        """The most bytes e's copy may take now (it may have grown since it was listed): the per-file
        limit, and what the total limit leaves (e's listed size counted already); None: no limit."""
        lim = self.limits
        left = None if lim.max_total_bytes is None else lim.max_total_bytes - self.total_bytes + e.size
        if lim.max_file_bytes is None:
            return left
        return lim.max_file_bytes if left is None else min(lim.max_file_bytes, left)

    def wrote(self, e: Entry, n: int) -> None:
        """e came back with n bytes, not the size it was listed with."""
        self.total_bytes += n - e.size

    def _skip(self, e: Entry, reason: str, why: str) -> Decision:
        self.skip(e.path, reason, e.size if e.kind == FILE else None, why)
        return Decision("skip", reason)

    def skip(self, path: str, reason: str, size: Optional[int] = None, why: str = NOT_COPIED) -> None:
        """Record an entry left behind (`why`: its kind of reason, for the count past SKIPPED_KEPT)."""
        if len(self._kept) < SKIPPED_KEPT:
            self._kept.append(Skipped(clip(path, SKIPPED_PATH_CHARS), clip(reason, SKIPPED_REASON_CHARS), size))
        else:
            self._more[why] = self._more.get(why, 0) + 1

    @property
    def skipped(self) -> list[Skipped]:
        """The record: the first entries left behind, then how many more by reason, then why the walk
        stopped early (if it did)."""
        more = [Skipped("...", f"{n:,} more not listed one by one: {why}") for why, n in self._more.items()]
        return self._kept + more + ([self._stop] if self._stop is not None else [])


def host_path(dest: Path, rel: str) -> Optional[Path]:
    """Where `rel` lands under dest, or None when it would land anywhere else."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts or "\0" in rel:
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
