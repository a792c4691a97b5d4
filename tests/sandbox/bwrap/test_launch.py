"""What the host reads back of a sandbox's resource limits (/proc/<pid>/limits, of a process given
known limits), and which limit holds memory with and without a cgroup."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from insandbox.sandbox import SandboxLimits
from insandbox.sandbox.bwrap import launch

SET = ("import resource as r, sys; r.setrlimit(r.RLIMIT_AS, (1 << 32, 1 << 32)); "
       "r.setrlimit(r.RLIMIT_NPROC, (50, 50)); print(flush=True); sys.stdin.read()")


def test_limits_are_read_back_from_outside():
    p = subprocess.Popen([sys.executable, "-c", SET], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        p.stdout.readline()  # its limits are set
        text = Path(f"/proc/{p.pid}/limits").read_text()
    finally:
        p.stdin.close()
        p.wait()
    assert launch.limits_refusal(text, {"RLIMIT_AS": 1 << 32, "RLIMIT_NPROC": 50}) == ""
    why = launch.limits_refusal(text, {"RLIMIT_AS": 64 << 20})
    assert why == f"the sandbox's init runs with max address space ['{1 << 32}', '{1 << 32}'], not {64 << 20}"
    assert "max file size ['unlimited', 'unlimited']" in launch.limits_refusal(text, {"RLIMIT_FSIZE": 1 << 20})


def test_memory_is_rlimit_as_without_a_cgroup_and_data_beside_one():
    lim = SandboxLimits(memory="64m", pids=10, disk="1m")
    assert launch.rlimits(lim)["RLIMIT_AS"] == 64 << 20 and "RLIMIT_DATA" not in launch.rlimits(lim)
    assert launch.rlimits(lim, True)["RLIMIT_DATA"] == 64 << 20 and "RLIMIT_AS" not in launch.rlimits(lim, True)
