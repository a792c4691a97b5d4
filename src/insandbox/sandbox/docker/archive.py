"""Tar streams for the engine's archive API: files cross the container boundary as
bytes inside tar members, so nothing is quoted, re-encoded or size-limited by a shell."""
from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Optional

from ...core import hostfiles
from ...core.errors import InternalSignal
from ..base import BLOCK_DEVICE, CHAR_DEVICE, DIRECTORY, FIFO, FILE, SYMLINK
from ..copyback import NOT_COPIED, CopyBudget, Entry, link_or_copy

SPOOL_BYTES = 8 * 1024 * 1024  # tars up to this size stay in memory
MAX_HEADER_BYTES = 1 << 20  # a member's long name or pax records, read whole by tarfile


class ArchiveTooLarge(InternalSignal):
    """An archive read from the engine holds more than the reader takes."""


def single_file_tar(name: str, data: bytes, mode: int = 0o644) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tar_of(host_path: Path, arcname: str = "") -> IO[bytes]:
    """A tar of a host file, or of a directory's contents, placed under `arcname`."""
    out = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if host_path.is_dir():
            for child in sorted(host_path.iterdir()):
                tar.add(str(child), arcname=os.path.join(arcname, child.name) if arcname else child.name)
        else:
            tar.add(str(host_path), arcname=arcname or host_path.name)
    out.seek(0)
    return out


def tar_of_texts(files: dict[str, bytes]) -> bytes:
    """A tar of in-memory files {relative path: bytes} (benchmark inputs)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def spool(chunks: Iterable[bytes], max_bytes: Optional[int] = None) -> IO[bytes]:
    """Collect a streamed tar, refusing more than max_bytes."""
    out = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if max_bytes is not None and total > max_bytes:
            out.close()
            raise ArchiveTooLarge(f"more than {max_bytes} bytes")
        out.write(chunk)
    out.seek(0)
    return out


def first_file(fileobj: IO[bytes]) -> tuple[tarfile.TarInfo, bytes]:
    with tarfile.open(fileobj=fileobj, mode="r|") as tar:
        for member in tar:
            f = tar.extractfile(member) if member.isfile() else None
            return member, (f.read() if f else b"")
    raise ValueError("empty archive")


class IterReader(io.RawIOBase):
    """A read-only file over an iterator of byte chunks, so a tar streamed by the engine is
    read as it arrives (never held in memory or on disk as a whole)."""

    def __init__(self, chunks: Iterable[bytes]):
        self.chunks = iter(chunks)
        self.pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        while not self.pending:
            try:
                self.pending = next(self.chunks)
            except StopIteration:
                return 0
        n = min(len(buf), len(self.pending))
        buf[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    src = tar.extractfile(member)
    with os.fdopen(hostfiles.open_for_writing(target), "wb") as f:
        if src is not None:
            shutil.copyfileobj(src, f, 1 << 20)
    os.chmod(target, (member.mode & 0o777) | 0o600)


def member_kind(member: tarfile.TarInfo) -> str:
    if member.isdir():
        return DIRECTORY
    if member.isreg():
        return FILE
    if member.issym():
        return SYMLINK
    if member.isfifo():
        return FIFO
    if member.ischr():
        return CHAR_DEVICE
    if member.isblk():
        return BLOCK_DEVICE
    return "special file"


class HeaderTooLarge(InternalSignal):
    """A member header over MAX_HEADER_BYTES (turned into the caller's own error)."""


class _BoundedHeader(tarfile.TarInfo):
    """A member header that refuses a long name or pax record over MAX_HEADER_BYTES: tarfile reads
    one whole into memory before the member it describes."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _LONG_HEADERS and self.size > MAX_HEADER_BYTES:
            raise HeaderTooLarge(f"a member header of {self.size:,} bytes")
        return super()._proc_member(tarfile_)


_LONG_HEADERS = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                 tarfile.SOLARIS_XHDTYPE)


def members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """A streamed tar's members, forgetting each once the next is read (tarfile keeps every one it has
    read in `members`, and a folder of many entries would hold them all)."""
    while True:
        member = tar.next()
        tar.members.clear()
        if member is None:
            return
        yield member


def extract_streamed(chunks: Iterable[bytes], dest: Path, budget: CopyBudget, strip_first: bool = True) -> list[str]:
    """Extract a streamed tar below `dest`, member by member, as `budget` decides.

    Returns the files written (relative paths); what was left out is in budget.skipped. The
    archive comes from a sandbox we do not trust: links are never created from it (a second
    name of a hard-linked file becomes a link made here, to the file we wrote), and any path
    that would land outside `dest` is skipped. Reading stops at the budget's bounds (entries,
    listing bytes): the caller closes the stream, so the rest is never read."""
    written: list[str] = []
    copied: set[str] = set()
    dest.mkdir(parents=True, exist_ok=True)
    reader = io.BufferedReader(IterReader(chunks), 1 << 20)
    try:
        with tarfile.open(fileobj=reader, mode="r|", tarinfo=_BoundedHeader) as tar:
            for member in members(tar):
                parts = [p for p in member.name.split("/") if p not in ("", ".")]
                if strip_first:
                    parts = parts[1:]
                if not parts:
                    continue
                rel = "/".join(parts)
                if member.islnk():  # a second name of a file earlier in the archive
                    link_parts = [p for p in member.linkname.split("/") if p not in ("", ".")]
                    first = "/".join(link_parts[1:] if strip_first else link_parts)
                    entry = Entry(rel, FILE, member.size, link_key=(0, 0))
                else:
                    first = ""
                    entry = Entry(rel, member_kind(member), member.size,
                                  target=member.linkname if member.issym() else "")
                if not budget.admit(entry):
                    break
                target = budget.place(dest, entry)
                if target is None:
                    continue
                if member.islnk():
                    if first in copied and link_or_copy(dest, first, rel):
                        written.append(rel)
                        copied.add(rel)
                    else:
                        budget.skip(rel, f"hard link to {first!r}, which was not copied", why=NOT_COPIED)
                    continue
                decision = budget.decide(entry)
                try:
                    if decision.action == "dir":
                        target.mkdir(exist_ok=True)
                    elif decision.action == "copy":
                        _write_member(tar, member, target)
                        written.append(rel)
                        copied.add(rel)
                except OSError as e:
                    budget.skip(rel, f"not written on the host: {e.strerror}",
                                entry.size if decision.action == "copy" else None)
    except HeaderTooLarge as e:
        budget.stop(f"the archive holds {e}, over {MAX_HEADER_BYTES:,}; the rest were not looked at")
    return written


def extract_single_file(chunks: Iterable[bytes], target: Path, max_bytes: Optional[int]) -> Optional[str]:
    """Write the one regular file a streamed tar holds to `target`; returns why it was not
    written (it is no longer a regular file, or grew past max_bytes), or None."""
    with tarfile.open(fileobj=io.BufferedReader(IterReader(chunks), 1 << 20), mode="r|") as tar:
        for member in tar:
            if not member.isreg():
                return f"became a {member_kind(member)} while copying"
            if max_bytes is not None and member.size > max_bytes:
                return f"grew to {member.size:,} bytes while copying, over the limit"
            _write_member(tar, member, target)
            return None
    return "vanished while copying"
