"""The host's own check of a reset (resetcheck.py, recycle.py's disk check) on real containers: what
the server missed or could not put back is killed, closed, put back or refused from this machine, and a
container that cannot be made as good as new is not reused. Where the server itself is honest, some
tests make it look away (tests/sandbox/test_hostview.py's `blind_server`), as the server that skipped
zombie leaders did: the host's check must hold on its own."""
from __future__ import annotations

import pytest

from insandbox.sandbox import SandboxError, SandboxLimits, hostview
from tests.sandbox.test_hostview import ZOMBIE_LEADER, blind_server

FRESH_LOOK = ("stat -c '%n %f %u %g %X %Y' /dev/null /dev/zero /dev/stdin /dev/fd /dev /dev/shm; "
              "cat /proc/1/coredump_filter; tail -n +2 /proc/net/tcp | wc -l; df -B1 --output=avail / | tail -1")


def test_a_process_that_looks_dead_does_not_reach_the_next_sample(sandbox_factory, run_async):
    """The attack: a leader exits alone (Z) while its thread rewrites /testbed/answer.txt; the next sample
    of the recycled container must grade its own answer."""
    async def go():
        sb = await sandbox_factory(recyclable=True)
        await sb.run(ZOMBIE_LEADER + "nohup python3 /tmp/leader.py /testbed/answer.txt >/dev/null 2>&1 &\nsleep 0.5")
        assert "Z" in (await sb.run("ps -eo stat=,comm= | grep python3 | grep -v '^S'")).output
        await sb.recycle()
        await sb.run("echo 42 > /testbed/answer.txt; sleep 0.5")
        assert (await sb.read_file("/testbed/answer.txt")).decode().strip() == "42"
        assert (await sb.run("ps -eo comm= | grep -c python3")).output.strip() == "1"  # the server alone

    run_async(go())


def test_the_host_kills_what_a_blind_server_leaves(sandbox_factory, run_async, monkeypatch):
    blind_server(monkeypatch, "end_other_processes")

    async def go():
        sb = await sandbox_factory(recyclable=True)
        await sb.run("nohup sleep 1000 >/dev/null 2>&1 & setsid sleep 1001 >/dev/null 2>&1 &")
        done = await sb.recycle()
        assert done["host_killed"] >= 2 and done["killed"] == 0, done  # the server said none
        assert (await sb.run("pgrep -c sleep || true")).output.strip() == "0"

    run_async(go())


def test_a_fork_bomb_a_blind_server_leaves_is_frozen_and_killed_from_the_host(sandbox_factory, run_async,
                                                                              monkeypatch):
    blind_server(monkeypatch, "end_other_processes")

    async def go():
        sb = await sandbox_factory(recyclable=True, limits=SandboxLimits(pids=200))
        await sb.run("(bomb() { bomb | bomb & }; bomb) >/dev/null 2>&1 & sleep 2")
        done = await sb.recycle()
        assert done["host_killed"] >= 50, done
        assert (await sb.run("ps -e --no-headers | wc -l")).output.strip() == "4"  # server, shell, ps, wc

    run_async(go())


def test_a_process_the_host_cannot_kill_costs_the_container(sandbox_factory, run_async, monkeypatch):
    blind_server(monkeypatch, "end_other_processes")

    async def go():
        sb = await sandbox_factory(recyclable=True)
        await sb.run("nohup sleep 1000 >/dev/null 2>&1 &")
        monkeypatch.setattr(hostview, "kill", lambda pids: None)  # as for a process in uninterruptible sleep
        with pytest.raises(SandboxError, match="survived the reset"):
            await sb.recycle()
        assert not sb.recyclable

    run_async(go())


def test_settings_a_blind_server_keeps_are_found_by_the_host(sandbox_factory, run_async, monkeypatch):
    """The server's own settings (here: its open files limit and core dump filter, lowered by the sample)
    are compared from this machine with their values at the start."""
    blind_server(monkeypatch, "put_settings_back")

    async def go():
        sb = await sandbox_factory(recyclable=True)
        await sb.run("echo 7f > /proc/1/coredump_filter; prlimit --pid 1 --nofile=512:4096")
        with pytest.raises(SandboxError, match="first process is not as it started.*(coredump_filter|limits)"):
            await sb.recycle()

    run_async(go())


def test_ipc_a_blind_server_leaves_is_found_by_the_host(sandbox_factory, run_async, monkeypatch):
    blind_server(monkeypatch, "remove_all_sysv")

    async def go():
        sb = await sandbox_factory(recyclable=True)
        await sb.run("ipcmk -M 4096 >/dev/null; ipcmk -Q >/dev/null")
        with pytest.raises(SandboxError, match="2 System V IPC object"):
            await sb.recycle()

    run_async(go())


def test_covert_channels_are_reset(sandbox_factory, run_async):
    """What a sample could leave for the next one outside the filesystem: /dev entries' times, the
    server's core dump filter, TIME_WAIT sockets. A recycled container shows what a fresh one shows."""
    async def go():
        fresh = await sandbox_factory(recyclable=True)
        before = (await fresh.run(FRESH_LOOK)).output.splitlines()
        await fresh.run("touch -a -d 2001-01-01 /dev/null; touch -m -d 2002-02-02 /dev/zero; "
                        "touch -h -d 2003-03-03 /dev/stdin /dev/fd; touch -d 2004-04-04 /dev/shm /dev; "
                        "echo 7f > /proc/1/coredump_filter; "
                        "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(); "
                        "c=socket.create_connection(s.getsockname()); a,_=s.accept(); c.close(); a.close()'")
        assert int((await fresh.run("tail -n +2 /proc/net/tcp | wc -l")).output) >= 1  # TIME_WAIT left
        done = await fresh.recycle()
        assert done["sockets_closed"] >= 1, done
        after = (await fresh.run(FRESH_LOOK)).output.splitlines()
        assert after[:-1] == before[:-1]
        assert abs(int(after[-1]) - int(before[-1])) < 1 << 20  # the free space, within the slack

    run_async(go())


def test_restored_copies_never_shrink_the_next_samples_disk(sandbox_factory, run_async):
    """Touching image files only (access times) copies them into the container's layer, and a restore
    keeps a copy each: a container that would offer its next sample less disk than a fresh one is not
    reused. A sample that changes a few small files is."""
    async def go():
        sb = await sandbox_factory(recyclable=True, limits=SandboxLimits(disk="500m"))
        fresh = int((await sb.run("df -B1 --output=avail / | tail -1")).output)
        await sb.run("echo x >> /etc/issue; touch -a /etc/passwd")
        await sb.recycle()
        again = int((await sb.run("df -B1 --output=avail / | tail -1")).output)
        assert fresh - again < 1 << 20
        await sb.run("find /usr/lib -type f -size +64k | head -n 2000 | xargs -d '\\n' touch -a")
        used = fresh - int((await sb.run("df -B1 --output=avail / | tail -1")).output)
        assert used > 50 << 20, used  # the copies really took the disk
        with pytest.raises(SandboxError, match="MiB .* of the container's disk"):
            await sb.recycle()

    run_async(go())
