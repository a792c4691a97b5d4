"""A trajectory.json from a run folder loaded within a memory budget: MEMORY_FACTOR times its size,
plus MEMORY_BASE.

What a JSON file costs once loaded depends on what it is made of, not only on its size: long strings
cost about their size, but tiny values cost far more than their bytes (`{},` is 3 bytes and a Python
dict of 64, `{"index":1,"started_at":0},` a StepRecord of 25 fields): 512 MiB of them would take
30 GB. A file larger than TRIAL_ABOVE is therefore loaded first by a child process, whose resident
memory this process reads from /proc while it loads and kills past the budget: a file that does not
load there within the budget is refused, in one line, before this process spends anything on it; one
that loads there is loaded here the same way, so it takes here what it took there. (The kernel's own
cap, RLIMIT_AS, is no use here: pydantic-core can hang instead of failing when an allocation is
refused.) A smaller file is loaded directly: whatever it is made of, it takes at most ~60 times its size.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Union

from ..core.errors import DataError
from ..core.trajectory import Trajectory

MIB = 1024 ** 2
MEMORY_FACTOR = 12  # insandbox's own trajectories take 4 to 6 times their size (benchmarks/bench_replay_memory.py)
MEMORY_BASE = 256 * MIB
TRIAL_ABOVE = 4 * MIB
TRIAL_TIMEOUT_S = 600.0
POLL_S = 0.005  # how often the child's memory is read: it allocates well under 1 GB in that time
_BAD = 4  # the child's exit status for a file that is not a trajectory (its one line on stdout)

# run in the child: say how much it holds before the load, then load what comes on stdin
_CHILD = """
import resource, sys
from insandbox.core.trajectory import Trajectory
with open("/proc/self/statm") as f:
    print(int(f.read().split()[1]) * resource.getpagesize(), flush=True)
size, where = int(sys.argv[1]), sys.argv[2]
try:
    Trajectory.loads(sys.stdin.buffer.read(size), where)
except MemoryError:
    sys.exit(3)
except ValueError as e:
    print(str(e).splitlines()[0] if str(e) else "not a trajectory")
    sys.exit(4)
print("ok")
"""


class TrajectoryTooCostly(DataError):
    """trajectory.json would take more memory to load than its budget; one line."""


def memory_budget(size: int) -> int:
    """What loading a trajectory.json of `size` bytes may take."""
    return MEMORY_FACTOR * size + MEMORY_BASE


def load_trajectory(raw: bytes, where: Union[Path, str] = "trajectory.json") -> Trajectory:
    """The trajectory in `raw` (a file's bytes, `where` it came from, for messages), loaded within
    memory_budget(len(raw)). ValueError of one line when it is not a trajectory (Trajectory.loads), or
    TrajectoryTooCostly when it would take more."""
    if len(raw) > TRIAL_ABOVE:
        _trial(raw, str(where))
    return Trajectory.loads(raw, where)


def _trial(raw: bytes, where: str) -> None:
    """Load `raw` in a child process held to the budget; returns when it loaded there."""
    budget = memory_budget(len(raw))
    # the child imports this insandbox; nothing else of this process's environment goes to it
    env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    try:
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(len(raw)), where], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except OSError as e:
        raise TrajectoryTooCostly(f"{where}: its memory cost could not be checked in a child process ({e}); "
                                  "not loaded") from None
    try:
        stopped, said, err = _watch(child, raw, budget)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
    if stopped == "timeout":
        raise TrajectoryTooCostly(f"{where}: loading it took more than {TRIAL_TIMEOUT_S:.0f} s in a child process; "
                                  "not loaded")
    if stopped == "memory":
        raise TrajectoryTooCostly(f"{where}: loading it would take more than {budget / MIB:,.0f} MiB of memory "
                                  f"({MEMORY_FACTOR} times its size, plus {MEMORY_BASE // MIB} MiB): it holds too "
                                  "many small values for a trajectory of its size")
    if child.returncode == 0 and said == "ok":
        return
    if child.returncode == _BAD and said:
        raise ValueError(said)
    last = (err.strip().splitlines() or [f"exit status {child.returncode}"])[-1]
    raise TrajectoryTooCostly(f"{where}: its memory cost could not be checked in a child process ({last}); "
                              "not loaded")


def _watch(child: subprocess.Popen, raw: bytes, budget: int) -> tuple[str, str, str]:
    """Feed `raw` to the child and read its memory until it ends: (why it was killed: "memory", "timeout"
    or "", its verdict line, its stderr)."""
    first = child.stdout.readline().strip()  # what it holds before the load
    base = int(first) if first.isdigit() else 0
    out: dict[str, bytes] = {}

    def feed() -> None:
        try:
            child.stdin.write(raw)
            child.stdin.close()
        except OSError:  # it ended (or was killed) before reading everything
            pass

    def drain(name: str, stream) -> None:
        out[name] = stream.read()

    threads = [threading.Thread(target=feed, daemon=True), threading.Thread(target=drain, args=("out", child.stdout),
                                                                            daemon=True),
               threading.Thread(target=drain, args=("err", child.stderr), daemon=True)]
    for t in threads:
        t.start()
    stopped, deadline = "", time.monotonic() + TRIAL_TIMEOUT_S
    statm = f"/proc/{child.pid}/statm"
    page = os.sysconf("SC_PAGE_SIZE")
    while child.poll() is None:
        try:
            with open(statm) as f:
                held = int(f.read().split()[1]) * page
        except (OSError, ValueError, IndexError):  # it has just ended
            held = 0
        if held - base > budget or time.monotonic() > deadline:
            stopped = "memory" if held - base > budget else "timeout"
            child.kill()
            break
        time.sleep(POLL_S)
    child.wait()
    for t in threads:
        t.join(timeout=10)
    said, err = (out.get(k, b"").decode("utf-8", "replace") for k in ("out", "err"))
    return stopped, said.strip(), err
