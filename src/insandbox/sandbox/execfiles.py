"""A sandbox's files through `exec` alone: the defaults of Sandbox's file operations, for a backend
with no faster way (Docker's and bwrap's go through their in-sandbox server, and for big files their
own ways: serverfiles.py).

Each operation is a short POSIX shell script run with `exec` in the sandbox (coreutils and findutils:
stat, readlink, base64, head, find), so every path is looked up as the sandbox's own processes see it:
symlinks are followed inside the sandbox, never on this machine. Bytes cross as base64 text both
ways, byte-exact whatever they hold. What comes back is the sandbox's word (its programs are the
model's to replace): it is parsed strictly and bounded here, a file read cut at its limit and one
byte more in the sandbox and checked again on this side, a copy-back's listing cut at its bound.
"""
from __future__ import annotations

import base64
import binascii
import os
import posixpath
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..core import hostfiles
from .base import (
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
    SandboxFileError,
)
from .copyback import CopyBudget, Entry, human_size, link_or_copy

if TYPE_CHECKING:
    from .base import Sandbox

# GNU stat's %F, and find's %y
KINDS = {"regular file": FILE, "regular empty file": FILE, "directory": DIRECTORY, "symbolic link": SYMLINK,
         "fifo": FIFO, "socket": SOCKET, "character special file": CHAR_DEVICE, "block special file": BLOCK_DEVICE}
LETTERS = {"f": FILE, "d": DIRECTORY, "l": SYMLINK, "p": FIFO, "s": SOCKET, "c": CHAR_DEVICE, "b": BLOCK_DEVICE}
STAT = "%F/%s/%a"
FILE_TIMEOUT_S = 300.0
PIECE_BYTES = 8 << 20  # of a file per exec, each way (its base64 must fit a reply of the backend's channel)
LISTING_SLACK_BYTES = 64 * 1024
FIELDS = 5  # of one entry of a copy-back's listing

# $1: a path. The path itself (not following a final link), then where a link points
STAT_SCRIPT = (f'if [ -e "$1" ] || [ -L "$1" ]; then stat -c "{STAT}" -- "$1" || exit 3; '
               '[ ! -L "$1" ] || readlink -- "$1"; else echo missing; fi')
# $1: a path. Its real path (every link followed), a NUL, then that path's stat when it exists
# (a loop of links leaves a link that leads nowhere: readlink -ev then says why)
RESOLVE_SCRIPT = ('r=$(readlink -m -- "$1") || exit 3; if [ -L "$r" ] && [ ! -e "$r" ]; then '
                  'readlink -ev -- "$1" >/dev/null || exit 3; fi; printf "%s\\0" "$r"; '
                  f'if [ -e "$r" ]; then stat -c "{STAT}" -- "$r" || exit 3; fi')
# $1: a path, $2: "nofollow" to refuse a final link, $3: the first byte (from 1), $4: how many at most
READ_SCRIPT = ('[ -f "$1" ] || exit 3; [ "$2" != nofollow ] || [ ! -L "$1" ] || exit 3; '
               'tail -c +"$3" -- "$1" | head -c "$4" | base64 -w0')
# $1: a path (no link left on it), $2: the mode in octal; stdin: the bytes in base64 (the first piece, then
# APPEND_SCRIPT for each further piece)
WRITE_SCRIPT = 'mkdir -p -- "$(dirname -- "$1")" && base64 -d > "$1" && chmod "$2" -- "$1"'
APPEND_SCRIPT = 'base64 -d >> "$1"'
# $1: a folder, $2: bytes at most. Entry by entry, never following a link: type, size,
# device:inode:links, path below $1, link target; each field NUL-terminated
LIST_SCRIPT = ('[ -d "$1" ] || exit 0; find -P "$1" -mindepth 1 -printf "%y\\0%s\\0%D:%i:%n\\0%P\\0%l\\0" '
               '| head -c "$2"')


async def _sh(sb: Sandbox, script: str, *args: str, stdin: str = "", timeout: float = FILE_TIMEOUT_S):
    return await sb.exec(["sh", "-c", script, "sh", *args], timeout=timeout, stdin=stdin)


def _stat(line: str, path: str, target: str = "") -> FileStat:
    kind, size, mode = line.rsplit("/", 2)
    return FileStat(name=posixpath.basename(path.rstrip("/")) or "/", size=int(size), mode=int(mode, 8),
                    kind=KINDS.get(kind, "special file"), link_target=target)


def _refused(path: str, res) -> SandboxFileError:
    return SandboxFileError(f"{path}: {res.stderr.strip() or f'exit code {res.exit_code}'}")


async def stat(sb: Sandbox, path: str) -> Optional[FileStat]:
    res = await _sh(sb, STAT_SCRIPT, path)
    if res.exit_code != 0:
        raise _refused(path, res)
    first, _, rest = res.stdout.partition("\n")
    if first == "missing":
        return None
    try:
        return _stat(first, path, rest[:-1] if rest.endswith("\n") else rest)
    except ValueError:
        raise SandboxFileError(f"{path}: the sandbox's stat said {first[:100]!r}") from None


async def resolve(sb: Sandbox, path: str) -> tuple[str, Optional[FileStat]]:
    res = await _sh(sb, RESOLVE_SCRIPT, path)
    if res.exit_code != 0:
        if "symbolic links" in res.stderr:
            raise SandboxFileError(f"{path}: too many levels of symbolic links")
        raise _refused(path, res)
    real, sep, line = res.stdout.partition("\0")
    if not sep or not real.startswith("/"):
        raise SandboxFileError(f"{path}: the sandbox's readlink said {res.stdout[:100]!r}")
    if not line.strip():
        return real, None
    try:
        return real, _stat(line.strip(), real)
    except ValueError:
        raise SandboxFileError(f"{path}: the sandbox's stat said {line[:100]!r}") from None


async def read_bytes(sb: Sandbox, path: str, max_bytes: Optional[int], follow: bool) -> Optional[bytes]:
    """The bytes of the regular file at path, at most max_bytes + 1 of them, piece by piece; None when it
    is not one."""
    pieces: list[bytes] = []
    got = 0
    while True:
        want = PIECE_BYTES if max_bytes is None else min(PIECE_BYTES, max_bytes + 1 - got)
        if want <= 0:
            break
        res = await _sh(sb, READ_SCRIPT, path, "follow" if follow else "nofollow", str(got + 1), str(want))
        if res.exit_code == 3:
            return None
        if res.exit_code != 0:
            raise SandboxFileError(f"cannot read {path}: {res.stderr.strip() or f'exit code {res.exit_code}'}")
        try:
            piece = base64.b64decode(res.stdout.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise SandboxFileError(f"cannot read {path}: the sandbox's base64 gave no base64") from None
        if len(piece) > want:
            raise SandboxFileError(f"cannot read {path}: the sandbox gave more bytes than were asked for")
        pieces.append(piece)
        got += len(piece)
        if len(piece) < want:
            break
    return b"".join(pieces)


async def read_file(sb: Sandbox, path: str, max_bytes: Optional[int]) -> bytes:
    path, st = await resolve(sb, path)
    if st is None:
        raise SandboxFileError(f"{path}: no such file")
    if not st.is_file:
        raise SandboxFileError(f"{path} is a {st.kind}, not a regular file")
    if max_bytes is not None and st.size > max_bytes:
        raise SandboxFileError(f"{path} is {st.size:,} bytes, over the {max_bytes:,}-byte limit")
    data = await read_bytes(sb, path, max_bytes, follow=True)
    if data is None:
        raise SandboxFileError(f"{path} is no longer a regular file")
    if max_bytes is not None and len(data) > max_bytes:
        raise SandboxFileError(f"{path} grew past the {max_bytes:,}-byte limit while it was read")
    return data


async def write_file(sb: Sandbox, path: str, data: bytes, mode: int) -> None:
    path, st = await resolve(sb, path)  # write where a symlink points, as open() would
    if st is not None and not st.is_file:
        raise SandboxFileError(f"{path} is a {st.kind}, not a regular file")
    first = data[:PIECE_BYTES]
    res = await _sh(sb, WRITE_SCRIPT, path, f"{mode & 0o7777:o}", stdin=base64.b64encode(first).decode("ascii"))
    for at in range(PIECE_BYTES, len(data), PIECE_BYTES):
        if res.exit_code != 0:
            break
        res = await _sh(sb, APPEND_SCRIPT, path, stdin=base64.b64encode(data[at:at + PIECE_BYTES]).decode("ascii"))
    if res.exit_code != 0:
        raise SandboxFileError(f"cannot write {path}: {res.stderr.strip() or f'exit code {res.exit_code}'}")


async def copy_in(sb: Sandbox, src: Path, container_dir: str) -> None:
    """A host file, or a host folder's contents (its symlinks as symlinks), into container_dir."""
    top = container_dir.rstrip("/") or "/"
    await sb._mkdir(top)
    if not src.is_dir():
        await write_file(sb, f"{top}/{src.name}", src.read_bytes(), src.stat().st_mode & 0o777)
        return
    for folder, dirs, files in os.walk(src):
        dirs.sort()
        rel = Path(folder).relative_to(src).as_posix()
        here = top if rel == "." else f"{top}/{rel}"
        if rel != ".":
            await sb._mkdir(here)
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]):
            host = Path(folder, name)
            if host.is_symlink():
                res = await sb.exec(["ln", "-sfn", "--", os.readlink(host), f"{here}/{name}"])
                if res.exit_code != 0:
                    raise SandboxFileError(f"cannot make the link {here}/{name}: {res.stderr.strip()}")
            elif host.is_file():
                await write_file(sb, f"{here}/{name}", host.read_bytes(), host.stat().st_mode & 0o777)


def _entries(text: str) -> tuple[list[Entry], str]:
    """The listing's entries, and why it ended early ("cut": at its bound; "unreadable"; "": it did not)."""
    fields = text.split("\0")
    complete = (len(fields) - 1) // FIELDS
    out = []
    for i in range(complete):
        kind, size, key, rel, target = fields[i * FIELDS:(i + 1) * FIELDS]
        try:
            dev, ino, links = (int(x) for x in key.split(":"))
            entry = Entry(rel, LETTERS.get(kind, "special file"), max(0, int(size)), None,
                          target if kind == "l" else "")
        except ValueError:
            return out, "unreadable"
        if entry.kind == FILE and links > 1:
            entry.link_key = (dev, ino)
        out.append(entry)
    return out, "cut" if len(fields) - 1 != complete * FIELDS or fields[-1] != "" else ""


async def copy_out(sb: Sandbox, container_dir: str, dest: Path, limits: Optional[CopyLimits]) -> CopyResult:
    """The folder listed in one exec (links never followed, no more bytes than the bound allows) and
    sorted as the in-sandbox server lists it (names in order, a folder before what it holds), then each
    file that fits read on its own; the same rules as every backend's (copyback.py)."""
    dest.mkdir(parents=True, exist_ok=True)
    budget = CopyBudget(limits)
    lim = budget.limits
    root = container_dir.rstrip("/") or "/"
    cap = 2 * lim.max_listing_bytes + LISTING_SLACK_BYTES  # find's fields take no more than the JSON measure
    res = await _sh(sb, LIST_SCRIPT, root, str(cap))
    if res.exit_code != 0:
        raise SandboxFileError(f"cannot list {root}: {res.stderr.strip() or f'exit code {res.exit_code}'}")
    entries, why = _entries(res.stdout)
    if len(res.stdout) >= cap:
        why = why or "cut"
    entries.sort(key=lambda e: e.path.split("/"))
    written: list[str] = []
    links: list[tuple[str, Entry]] = []
    for e, target, d in budget.admitted(entries, dest):
        if d.action == "link":
            links.append((d.source, e))
        elif d.action == "copy":
            room = budget.room(e)
            data = await read_bytes(sb, f"{root}/{e.path}", room, follow=False)
            if data is None:
                budget.skip(e.path, "changed while copying: no longer a regular file", e.size)
                continue
            if room is not None and len(data) > room:
                budget.skip(e.path, f"grew to over {human_size(room)} while copying, past the limits", e.size)
                continue
            try:
                hostfiles.write_bytes(target, data)
            except OSError as err:
                budget.skip(e.path, f"not written on the host: {err.strerror}", e.size)
                continue
            budget.wrote(e, len(data))
            written.append(e.path)
    if why == "cut":
        budget.stop_listing()
    elif why:
        budget.stop(f"the sandbox's listing could not be read past {len(entries):,} entries; the rest were not "
                    "looked at")
    copied = set(written)
    for first, e in links:
        if first in copied and link_or_copy(dest, first, e.path):
            written.append(e.path)
        else:
            budget.skip(e.path, f"hard link to {first!r}, which was not copied", e.size)
    return CopyResult(written, budget.skipped)
