"""Copy-back of a hostile output folder from real bwrap sandboxes, through the backend's own walk on the
host side (the server gone; through the server it is the conformance suite's): every kind of entry
counts, the listing stops at its bound in bytes, and the record of what was left behind stays small."""
from __future__ import annotations

import asyncio

from insandbox.sandbox import CopyLimits
from insandbox.sandbox.copyback import SKIPPED_KEPT, SKIPPED_PATH_CHARS
from tests.sandbox.conformance.cases import KINDS, LONG_LINKS, LONG_PATHS, on_host


async def filled(bwrap_factory, script: str, via: str):
    sb = await bwrap_factory()
    r = await sb.run(script, timeout=300)
    assert r.exit_code == 0, r.output
    if via == "host-side":
        await sb.channel.close()  # as if the server had died: stdin closed, it ends the sandbox
        await asyncio.wait_for(sb.proc.wait(), 10)
    return sb


def test_folders_links_and_fifos_count_against_the_entry_limit_on_the_host_side(bwrap_factory, run_async, tmp_path):
    """Regression: the host-side walk counted regular files only and kept a descriptor open for every
    folder waiting its turn; now every entry counts and past the limit nothing more is made or opened."""
    async def body():
        sb = await filled(bwrap_factory, KINDS, "host-side")
        few = await sb.copy_out("/testbed/output", tmp_path / "few", CopyLimits(max_entries=50))
        assert 0 < len(on_host(tmp_path / "few")) <= 50 and few.files == []
        assert "more than 50 entries" in few.skipped[-1].reason
        some = await sb.copy_out("/testbed/output", tmp_path / "some", CopyLimits(max_entries=150))
        assert some.files == [] and len(on_host(tmp_path / "some")) == 60  # links and FIFOs counted
        every = await sb.copy_out("/testbed/output", tmp_path / "all", CopyLimits(max_entries=190))
        assert sorted(every.files) == [f"z{i}" for i in range(10)] and len(on_host(tmp_path / "all")) == 70
        await sb.close()
    run_async(body())


def test_long_paths_stop_at_the_listing_bound_on_the_host_side(bwrap_factory, run_async, tmp_path):
    async def body():
        sb = await filled(bwrap_factory, LONG_PATHS, "host-side")
        bound = 64 * 1024
        copied = await sb.copy_out("/testbed/output", tmp_path / "out", CopyLimits(max_entries=None,
                                                                                   max_listing_bytes=bound))
        assert 0 < len(copied.files) < 100 and sum(len(p) for p in on_host(tmp_path / "out")) <= bound
        assert "listing passed 64.0 KiB" in copied.skipped[-1].reason
        await sb.close()
    run_async(body())


def test_the_record_of_what_was_left_behind_is_bounded_on_the_host_side(bwrap_factory, run_async, tmp_path):
    async def body():
        sb = await filled(bwrap_factory, LONG_LINKS, "host-side")
        copied = await sb.copy_out("/testbed/output", tmp_path / "out", CopyLimits(max_entries=None))
        kept = [s for s in copied.skipped if s.path != "..."]
        assert len(kept) == SKIPPED_KEPT and all(len(s.path) <= SKIPPED_PATH_CHARS for s in kept)
        assert [s.reason for s in copied.skipped if s.path == "..."] == [
            f"{1000 - SKIPPED_KEPT:,} more not listed one by one: symbolic links (not followed)"]
        await sb.close()
    run_async(body())
