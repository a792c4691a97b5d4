"""Copy-back from a streamed tar (the path taken when the sandbox's server is gone): the same
rules as the normal path, member by member, and nothing lands outside the destination."""
from __future__ import annotations

import io
import tarfile

from insandbox.sandbox.base import CopyLimits
from insandbox.sandbox.copyback import CopyBudget
from insandbox.sandbox.docker.archive import extract_streamed


def _tar(members: list[tuple[tarfile.TarInfo, bytes]]) -> list[bytes]:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    raw = buf.getvalue()
    return [raw[i:i + 1000] for i in range(0, len(raw), 1000)]  # as the engine streams it, in chunks


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o755 if name.endswith(".sh") else 0o644
    return info


def test_streamed_copy_back_keeps_what_fits_and_lists_the_rest(tmp_path):
    chunks = _tar([
        (_member("output/ok/a.txt"), b"fine"),
        (_member("output/run.sh"), b"#!/bin/sh\n"),
        (_member("output/../../evil.txt"), b"bad"),
        (_member("output/link", tarfile.SYMTYPE, "/etc/passwd"), b""),
        (_member("output/pipe", tarfile.FIFOTYPE), b""),
        (_member("output/big.bin"), b"x" * 5000),
        (_member("output/second-name.txt", tarfile.LNKTYPE, "output/ok/a.txt"), b""),
    ])
    budget = CopyBudget(CopyLimits(max_file_bytes=4096))
    dest = tmp_path / "dest"
    written = extract_streamed(chunks, dest, budget)
    assert written == ["ok/a.txt", "run.sh", "second-name.txt"]
    assert (dest / "ok/a.txt").read_bytes() == b"fine" and (dest / "second-name.txt").read_bytes() == b"fine"
    assert (dest / "run.sh").stat().st_mode & 0o100  # executable stays executable
    reasons = {s.path: s.reason for s in budget.skipped}
    assert set(reasons) == {"../../evil.txt", "link", "pipe", "big.bin"}
    assert "outside" in reasons["../../evil.txt"] and "symbolic link to '/etc/passwd'" in reasons["link"]
    assert "FIFO" in reasons["pipe"] and "per-file limit" in reasons["big.bin"]
    assert not (tmp_path / "evil.txt").exists() and not (dest / "link").exists() and not (dest / "pipe").exists()


def test_a_member_header_past_its_bound_stops_the_stream(tmp_path):
    """tarfile reads a member's long name or pax records whole before the member: one of 2 MiB (a
    path no listing would pass) stops the stream there, recorded, with what came before kept."""
    chunks = _tar([(_member("output/first.txt"), b"one"), (_member("output/" + "a/" * (1 << 20) + "x"), b"x"),
                   (_member("output/last.txt"), b"two")])
    budget = CopyBudget(CopyLimits())
    assert extract_streamed(chunks, tmp_path / "dest", budget) == ["first.txt"]
    assert budget.stopped and "member header of" in budget.skipped[-1].reason
