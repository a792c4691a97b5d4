"""Copy-back of an output folder that tries to cost the host, the Docker backend's own ways: the
engine's archive stream when the server is gone (many folders, links and FIFOs, long paths, long link
targets), and a server that answers past the bound it was given. The same folders through each
backend's usual way are the conformance suite's (conformance/test_copyback.py); the bwrap backend's
host-side walk is tried in bwrap/test_copyback.py."""
from __future__ import annotations

import json

import pytest

from insandbox.sandbox import CopyLimits, SandboxError
from insandbox.sandbox.copyback import SKIPPED_KEPT, SKIPPED_PATH_CHARS, SKIPPED_REASON_CHARS, CopyBudget, Entry
from insandbox.sandbox.guest import protocol
from insandbox.sandbox.serverfiles import listed_entries
from tests.sandbox.conformance.cases import KINDS, LONG_LINKS, LONG_PATHS, on_host


async def filled(sandbox_factory, script: str, via: str):
    sb = await sandbox_factory()
    r = await sb.run(script, timeout=300)
    assert r.exit_code == 0, r.output
    if via == "archive":
        await sb.channel.close()  # as if the server had died: the engine's archive stream is the way
    return sb


VIA = pytest.mark.parametrize("via", ["server", "archive"])


def test_every_entry_counts_against_the_limit_through_the_archive_stream(sandbox_factory, run_async, tmp_path):
    """Regression: only regular files counted, so 100,000 empty folders all came back (393 MB on the
    host), and links and FIFOs cost a listing and a record each without limit. Now every entry counts:
    past the limit nothing more is made, looked at or recorded one by one."""
    async def body():
        sb = await filled(sandbox_factory, KINDS, "archive")
        few = await sb.copy_out("/testbed/output", tmp_path / "few", CopyLimits(max_entries=50))
        made = on_host(tmp_path / "few")
        assert 0 < len(made) <= 50 and few.files == []
        assert "more than 50 entries" in few.skipped[-1].reason and few.skipped[-1].path == "..."

        # 60 folders, 60 links and 60 FIFOs pass 150: the files sorted after them are not reached
        some = await sb.copy_out("/testbed/output", tmp_path / "some", CopyLimits(max_entries=150))
        assert some.files == [] and len(on_host(tmp_path / "some")) == 60
        assert "more than 150 entries" in some.skipped[-1].reason

        every = await sb.copy_out("/testbed/output", tmp_path / "all", CopyLimits(max_entries=190))
        assert sorted(every.files) == [f"z{i}" for i in range(10)] and len(on_host(tmp_path / "all")) == 70
        assert len(every.skipped) == 120 and not any(s.path == "..." for s in every.skipped)
        await sb.close()
    run_async(body())


def test_long_paths_stop_at_the_listing_bound_through_the_archive_stream(sandbox_factory, run_async, tmp_path):
    """Regression: 30,000 paths of ~3,700 characters were listed whole (the host went from 88 MB to
    524 MB). The listing now has a bound in bytes, the same whichever way the folder comes back."""
    async def body():
        sb = await filled(sandbox_factory, LONG_PATHS, "archive")
        bound = 64 * 1024
        copied = await sb.copy_out("/testbed/output", tmp_path / "out",
                                   CopyLimits(max_entries=None, max_listing_bytes=bound))
        assert 0 < len(copied.files) < 100
        assert sum(len(p) for p in on_host(tmp_path / "out")) <= bound
        assert "listing passed 64.0 KiB" in copied.skipped[-1].reason
        await sb.close()
    run_async(body())


def test_the_servers_listing_keeps_the_bound_it_was_given(sandbox_factory, run_async):
    async def body():
        sb = await filled(sandbox_factory, LONG_PATHS, "server")
        bound = 64 * 1024
        reply = await sb._request(protocol.LIST_TREE, 30.0, path="/testbed/output", max_entries=None, max_bytes=bound)
        assert reply["truncated"] and len(json.dumps(reply)) <= bound + 1024
        assert 0 < len(reply["entries"]) < 112
        await sb.close()
    run_async(body())


def test_the_record_of_what_was_left_behind_is_bounded_through_the_archive_stream(sandbox_factory, run_async, tmp_path):
    """Regression: every skipped entry was recorded whole (a 118 MB trajectory.json). Now the first
    entries are kept, clipped, and the rest are counted by reason."""
    async def body():
        sb = await filled(sandbox_factory, LONG_LINKS + "\necho kept > /testbed/output/zz.txt", "archive")
        copied = await sb.copy_out("/testbed/output", tmp_path / "out", CopyLimits(max_entries=None))
        assert copied.files == ["zz.txt"]
        kept = [s for s in copied.skipped if s.path != "..."]
        assert len(kept) == SKIPPED_KEPT and all(len(s.path) <= SKIPPED_PATH_CHARS for s in kept)
        assert all(len(s.reason) <= SKIPPED_REASON_CHARS for s in kept) and "symbolic link" in kept[0].reason
        summary = [s.reason for s in copied.skipped if s.path == "..."]
        assert summary == [f"{1000 - SKIPPED_KEPT:,} more not listed one by one: symbolic links (not followed)"]
        assert len(json.dumps([vars(s) for s in copied.skipped])) < SKIPPED_KEPT * 700
        await sb.close()
    run_async(body())


def test_a_listing_past_the_asked_bound_is_refused(sandbox_factory, run_async, tmp_path):
    """The server is in the sandbox: its reply is read within the bound the host asked for, never
    trusted to keep it. Here the real server answers honestly a request for more than the host reads
    (as a server changed by the sandbox's code could): the channel refuses the reply, and copy-back
    still comes through the engine."""
    async def body():
        sb = await filled(sandbox_factory, LONG_PATHS, "server")
        with pytest.raises(SandboxError, match="more than 65,536 bytes"):
            await sb._request(protocol.LIST_TREE, 30.0, path="/testbed/output", max_entries=None,
                              max_bytes=10 << 20, reply_limit=64 * 1024)
        copied = await sb.copy_out("/testbed/output", tmp_path / "out")
        assert len(copied.files) == 100
        await sb.close()
    run_async(body())


def test_a_listing_with_more_entries_than_asked_is_cut():
    """A reply within its bytes that holds more entries than were asked for: the rest are not used."""
    reply = {"entries": [{"path": f"f{i}", "kind": "file", "size": 1} for i in range(100)], "truncated": False}
    entries, truncated = listed_entries(reply, 11)
    assert len(entries) == 11 and truncated
    assert listed_entries({"entries": [{"kind": "file"}], "truncated": False}, 11) is None  # not a listing
    assert listed_entries({"entries": "x", "truncated": False}, 11) is None


def test_the_budget_counts_every_kind_of_entry():
    budget = CopyBudget(CopyLimits(max_entries=3))
    kinds = [Entry("d", "directory"), Entry("l", "symlink", target="/x"), Entry("p", "fifo"), Entry("f", "file")]
    assert [budget.admit(e) for e in kinds] == [True, True, True, False]
    assert budget.stopped and "more than 3 entries" in budget.skipped[-1].reason


@VIA
def test_a_path_too_long_for_the_host_costs_only_itself(sandbox_factory, run_async, tmp_path, via):
    """A path the sandbox can hold (4,000 characters) that is too long once below the host's folder:
    that entry is recorded and left behind, the others come back."""
    async def body():
        sb = await filled(sandbox_factory, """python3 - <<'EOF'
import os
d = "/testbed/output/deep"
for i in range(16):
    d = os.path.join(d, "d%02d" % i + "x" * 246)
os.makedirs(d)
open(os.path.join(d, "f"), "w").write("f")
open("/testbed/output/top.txt", "w").write("top")
EOF""", via)
        dest = tmp_path / ("h" * 200) / "out"
        copied = await sb.copy_out("/testbed/output", dest)
        assert copied.files == ["top.txt"] and (dest / "top.txt").read_text() == "top"
        assert any("cannot be placed on the host: File name too long" in s.reason for s in copied.skipped)
        await sb.close()
    run_async(body())
