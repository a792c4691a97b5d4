"""What this machine reads of a sandbox from outside it (hostview.py): which processes a timed-out command
left (pure, on made-up process tables), and, on real containers, the sandbox's processes through its
cgroup, a timeout the host checks itself, and a thread-group leader that exits alone (state Z while its
threads run), which the in-sandbox server once took for dead."""
from __future__ import annotations

import os

from insandbox.sandbox import hostview
from insandbox.sandbox.hostview import Task
from insandbox.tools.bash import render

# A process that leaves with the raw exit system call from its main thread while another thread runs on:
# `ps` shows it as a zombie (Zl), yet its thread keeps writing. Argument: the file it writes to.
ZOMBIE_LEADER = r"""
cat > /tmp/leader.py <<'PY'
import ctypes, sys, threading, time
def keep_writing():
    while True:
        try:
            with open(sys.argv[1], "w") as f:
                f.write("POISONED")
        except OSError:
            pass
        time.sleep(0.05)
threading.Thread(target=keep_writing).start()
time.sleep(0.2)
nr = {"x86_64": 60, "aarch64": 93}[__import__("platform").machine()]
ctypes.CDLL(None).syscall(nr, 0)  # exit of this thread only: the process shows Z, its thread runs
PY
"""


def blind_server(monkeypatch, method: str) -> None:
    """Sandboxes started from now on run a server whose `method` returns at once, doing nothing: a
    server that looks away, as the one that skipped zombie leaders did."""
    from insandbox.sandbox import channel
    from insandbox.sandbox.bwrap import backend as bwrap_backend
    from insandbox.sandbox.docker import backend

    source = channel.server_source()
    head = next(line for line in source.splitlines() if line.strip().startswith(f"def {method}("))
    indent = head[:len(head) - len(head.lstrip())]
    said = {"end_other_processes": "(0, 0)", "remove_all_sysv": "(0, 0)", "put_settings_back": "[]"}.get(
        method, "None")  # what the server says when all is well
    blind = source.replace(head + "\n", f"{head}\n{indent}    return {said}\n", 1)
    assert blind != source
    monkeypatch.setattr(backend, "server_source", lambda: blind)
    monkeypatch.setattr(bwrap_backend, "server_source", lambda: blind)


def task(pid, ppid, start, ns_pid=None, running=True, state="S") -> Task:
    return Task(pid, ppid, state, start, ns_pid if ns_pid is not None else pid, running)


def test_what_a_timed_out_command_left_is_what_started_since_and_not_under_an_older_job():
    init, shell, job, job_child, cmd, cmd_child, orphan, zombie, dead = 100, 101, 102, 110, 111, 112, 113, 114, 115
    tasks = {p.pid: p for p in [
        task(init, 1, 1000), task(shell, init, 1000),
        task(job, shell, 1500),  # a background job of an earlier command
        task(job_child, job, 2100),  # it forks while the command runs: the job's, spared
        task(cmd, shell, 2050), task(cmd_child, cmd, 2060),
        task(orphan, init, 2070),  # a double fork of the command: its parent is now init
        task(zombie, init, 2080, running=True, state="Z"),  # a leader gone alone, its threads running
        task(dead, init, 2090, running=False, state="Z"),  # truly dead, waiting to be collected
    ]}
    left = hostview.command_leftovers(tasks, {init, shell}, start=2000, last_ns_pid=105)
    assert left == {cmd, cmd_child, orphan, zombie}


def test_within_a_clock_tick_of_the_start_the_pid_counter_decides():
    init, shell = 1, 2
    before, after = task(50, shell, 2000, ns_pid=50), task(60, shell, 2000, ns_pid=60)
    tasks = {t.pid: t for t in [task(init, 0, 10), task(shell, init, 10), before, after]}
    assert hostview.command_leftovers(tasks, {init, shell}, start=2000, last_ns_pid=55) == {60}


def test_the_model_is_told_killed_only_when_the_host_saw_it():
    from insandbox.sandbox.base import CommandResult

    seen = render(CommandResult("", None, timed_out=True, kill_checked=True), 5)
    assert "every process it started were killed" in seen
    unseen = render(CommandResult("", None, timed_out=True), 5)
    assert "killed" not in unseen and "sent a kill signal" in unseen
    left = render(CommandResult("", None, timed_out=True, kill_checked=True, survivors=2), 5)
    assert "2 processes it started could not be killed" in left


def test_the_host_sees_the_sandboxes_processes_and_nothing_else(sandbox_factory, run_async):
    async def go():
        sb = await sandbox_factory()
        view = await sb._process_view()
        assert view is not None and view.init_pid == await sb._server_pid()
        await sb.run("sleep 1000 & sleep 1001 & sleep 0.3")  # until both have become sleep
        pids = view.pids()
        assert os.getpid() not in pids and view.init_pid in pids
        names = sorted(open(f"/proc/{p}/comm").read().strip() for p in view.others())
        assert names == ["bash", "sleep", "sleep"]  # the shell and its two jobs

    run_async(go())


def test_a_timed_out_command_is_checked_and_finished_from_the_host(sandbox_factory, run_async):
    """The leader of the command's process exits alone (state Z) while its thread writes on: the host
    finds it through the cgroup and kills it; the model is told "killed" because the host saw it."""
    async def go():
        sb = await sandbox_factory()
        await sb.run(ZOMBIE_LEADER)
        res = await sb.run("python3 /tmp/leader.py /tmp/mark; sleep 100", timeout=2)
        assert res.timed_out and res.kill_checked and res.survivors == 0
        await sb.run("rm -f /tmp/mark; sleep 0.5")
        after = await sb.run("sleep 0.5; cat /tmp/mark 2>&1; ps -eo stat=,comm= | grep -c python3")
        assert "No such file" in after.output, after.output  # nothing writes it any more
        assert after.output.split()[-1] == "1"  # the server alone
        assert "every process it started were killed" in render(res, 2)

    run_async(go())


def test_the_host_finishes_what_the_server_missed_after_a_timeout(sandbox_factory, run_async, monkeypatch):
    """Even if the server looked away (made here: its kill after a timeout does nothing), the host's own
    look kills the command's processes, and a background job of an earlier command is left alone."""
    blind_server(monkeypatch, "kill_command")

    async def go():
        sb = await sandbox_factory()
        await sb.run("sleep 1001 &")  # an earlier command's job: kept
        job = await sb.run("pgrep -f 'sleep 1001'")
        # a command that survives a server that does not kill: it detaches and ignores every signal it can
        res = await sb.run("setsid sleep 1002 & sleep 100", timeout=1)
        assert res.timed_out and res.kill_checked and res.survivors == 0
        ps = (await sb.run("pgrep -f 'sleep 100[12]' | tr '\\n' ' '")).output.split()
        assert ps == job.output.split()

    run_async(go())
