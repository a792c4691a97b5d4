"""Copy-back of an output folder: regular files come back file by file, byte-exact, within the
limits; symbolic links are never followed, FIFOs and other special files never opened, each left
behind with its reason; a hard link's second name comes back too. What one copy-back costs this
machine stays bounded whatever the folder holds: every entry counts, the listing has a bound in bytes,
the record of what was left behind stays small."""
from __future__ import annotations

import hashlib
import json
import os

from insandbox.sandbox import CopyLimits
from insandbox.sandbox.copyback import SKIPPED_KEPT, SKIPPED_PATH_CHARS, SKIPPED_REASON_CHARS
from tests.sandbox.conformance.cases import KINDS, LONG_LINKS, LONG_PATHS, on_host


def test_files_come_back_links_and_fifos_do_not(backend, tmp_path):
    async def body():
        sb = await backend.make()
        r = await sb.run("mkdir -p /testbed/output && cd /testbed/output && mkdir -p x/y && printf deep > x/y/z.txt "
                         "&& printf top > top.txt && head -c 3000000 /dev/urandom > big.bin && ln big.bin twin.bin && "
                         "ln -s /etc/passwd link && ln -s / root-link && ln -s missing dangling && mkfifo pipe && "
                         "printf '' > empty && sha256sum big.bin")
        assert r.exit_code == 0, r.output
        want = r.output.split()[0]
        copied = await sb.copy_out("/testbed/output", tmp_path / "out")
        assert sorted(copied.files) == ["big.bin", "empty", "top.txt", "twin.bin", "x/y/z.txt"]
        assert hashlib.sha256((tmp_path / "out/big.bin").read_bytes()).hexdigest() == want
        assert hashlib.sha256((tmp_path / "out/twin.bin").read_bytes()).hexdigest() == want
        assert (tmp_path / "out/x/y/z.txt").read_bytes() == b"deep" and (tmp_path / "out/empty").read_bytes() == b""
        why = {s.path: s.reason for s in copied.skipped}
        assert set(why) == {"link", "root-link", "dangling", "pipe"} and "FIFO" in why["pipe"]
        assert "symbolic link to '/etc/passwd'" in why["link"]
        for name in why:
            assert not os.path.lexists(tmp_path / "out" / name)

        few = await sb.copy_out("/testbed/output", tmp_path / "few", CopyLimits(max_file_bytes=10))
        assert sorted(few.files) == ["empty", "top.txt", "x/y/z.txt"]
        assert "per-file limit" in {s.path: s.reason for s in few.skipped}["big.bin"]
        total = await sb.copy_out("/testbed/output", tmp_path / "total", CopyLimits(max_total_bytes=5))
        assert len(total.files) < 5 and sum(os.path.getsize(tmp_path / "total" / f) for f in total.files) <= 5
        assert any("total limit" in s.reason for s in total.skipped)
        none = await sb.copy_out("/testbed/nothing-here", tmp_path / "none")
        assert none.files == [] and none.skipped == []
    backend.run(body)


def test_folders_links_and_fifos_count_against_the_entry_limit(backend, tmp_path):
    """Every entry counts (folders, links, FIFOs as much as files): past the limit nothing more is made,
    looked at or recorded one by one."""
    async def body():
        sb = await backend.make()
        r = await sb.run(KINDS, timeout=300)
        assert r.exit_code == 0, r.output
        few = await sb.copy_out("/testbed/output", tmp_path / "few", CopyLimits(max_entries=50))
        assert 0 < len(on_host(tmp_path / "few")) <= 50 and few.files == []
        assert "more than 50 entries" in few.skipped[-1].reason and few.skipped[-1].path == "..."
        # 60 folders, 60 links and 60 FIFOs pass 150: the files sorted after them are not reached
        some = await sb.copy_out("/testbed/output", tmp_path / "some", CopyLimits(max_entries=150))
        assert some.files == [] and len(on_host(tmp_path / "some")) == 60
        every = await sb.copy_out("/testbed/output", tmp_path / "all", CopyLimits(max_entries=190))
        assert sorted(every.files) == [f"z{i}" for i in range(10)] and len(on_host(tmp_path / "all")) == 70
        assert len(every.skipped) == 120 and not any(s.path == "..." for s in every.skipped)
    backend.run(body)


def test_long_paths_stop_at_the_listing_bound(backend, tmp_path):
    async def body():
        sb = await backend.make()
        r = await sb.run(LONG_PATHS, timeout=300)
        assert r.exit_code == 0, r.output
        bound = 64 * 1024
        copied = await sb.copy_out("/testbed/output", tmp_path / "out",
                                   CopyLimits(max_entries=None, max_listing_bytes=bound))
        assert 0 < len(copied.files) < 100 and sum(len(p) for p in on_host(tmp_path / "out")) <= bound
        assert "listing passed 64.0 KiB" in copied.skipped[-1].reason
    backend.run(body)


def test_the_record_of_what_was_left_behind_is_bounded(backend, tmp_path):
    async def body():
        sb = await backend.make()
        r = await sb.run(LONG_LINKS + "\necho kept > /testbed/output/zz.txt", timeout=300)
        assert r.exit_code == 0, r.output
        copied = await sb.copy_out("/testbed/output", tmp_path / "out", CopyLimits(max_entries=None))
        assert copied.files == ["zz.txt"]
        kept = [s for s in copied.skipped if s.path != "..."]
        assert len(kept) == SKIPPED_KEPT and all(len(s.path) <= SKIPPED_PATH_CHARS for s in kept)
        assert all(len(s.reason) <= SKIPPED_REASON_CHARS for s in kept) and "symbolic link" in kept[0].reason
        assert [s.reason for s in copied.skipped if s.path == "..."] == [
            f"{1000 - SKIPPED_KEPT:,} more not listed one by one: symbolic links (not followed)"]
        assert len(json.dumps([vars(s) for s in copied.skipped])) < SKIPPED_KEPT * 700
    backend.run(body)
