"""Tar streams for the engine's archive API: files cross the container boundary as
bytes inside tar members, so nothing is quoted, re-encoded or size-limited by a shell."""
from __future__ import annotations

import io
import os
import tarfile
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Optional

SPOOL_BYTES = 8 * 1024 * 1024  # tars up to this size stay in memory


class ArchiveTooLarge(Exception):
    pass


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


def extract_safely(fileobj: IO[bytes], dest: Path, strip_first: bool = True) -> tuple[list[str], list[str]]:
    """Extract regular files and directories below `dest` only.

    Returns (files written, entries skipped). Links, devices and any path that would
    land outside `dest` are skipped: the archive comes from a sandbox we do not trust.
    """
    dest = dest.resolve()
    written, skipped = [], []
    with tarfile.open(fileobj=fileobj, mode="r|") as tar:
        for member in tar:
            parts = [p for p in member.name.split("/") if p not in ("", ".")]
            if strip_first:
                parts = parts[1:]
            if not parts:
                continue
            rel = "/".join(parts)
            target = dest.joinpath(*parts)
            if ".." in parts or not str(target.resolve()).startswith(str(dest) + os.sep):
                skipped.append(rel)
                continue
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                with open(target, "wb") as f:
                    while True:
                        block = src.read(1 << 20)
                        if not block:
                            break
                        f.write(block)
                os.chmod(target, (member.mode & 0o777) | 0o600)
                written.append(rel)
            else:
                skipped.append(rel)
    return written, skipped
