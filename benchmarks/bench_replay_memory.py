"""What loading a run folder's trajectory.json costs in memory, the way `insandbox replay` and `fork` load it.

    .venv/bin/python benchmarks/bench_replay_memory.py [--sizes 16,64,256] [--shapes all] [--max-memory 12]

For each shape and size (MiB) it writes a run folder under --out (kept for the next run), then loads it in
a fresh process with `load_recorded` (replay/replayer.py: the safe read, the parse, the checks) and prints
that process's peak RSS beyond what it held before the load, divided by the file's size; with a memory
budget (runs/trajectory_budget.py) also the peak of the child process that tries the load first. Each load
is stopped once it holds more than --max-memory GiB, so a shape that would take more stops there instead of
pushing the machine into the OOM killer ("over the cap" in the table).

Shapes: two honest ones, as insandbox writes them (Trajectory.to_json):
- observations: steps of 16,000-character tool outputs of code (braces, quotes, escapes, some non-ASCII
  and an emoji), each also in the conversation;
- logprobs: steps whose replies carry --logprobs with 20 alternatives per token;
and three hostile ones, written compactly as a crafted folder would be:
- dicts: `[{},{},...]` in task (kept as it is: dict[str, Any]);
- messages: `[{},{},...]` as the conversation (list[dict]: pydantic copies every dict);
- steps: `[{"index":1,"started_at":0},...]` (each a StepRecord of 25 fields).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

MIB = 1024 ** 2
SHAPES = ("observations", "logprobs", "dicts", "messages", "steps")
HEADER = {"schema_version": 3, "run_id": "bench", "mode": "sandbox",
          "task": {"id": "t", "prompt": "p", "sandbox_dirs": {"working_dir": "/testbed", "input_dir": "/testbed/input",
                                                              "output_dir": "/testbed/output"}},
          "config": {}}

CODE = ('def f(x):\n    return {"a": [x, {"b": (1, 2)}], \'c\': "q\\"uote"}  # café 中文\n' * 250)[:15_990] + " 🙂"


def _honest(path: Path, size: int, shape: str) -> None:
    """A trajectory of about `size` bytes written by insandbox's own writer."""
    from insandbox.core.trajectory import StepRecord, ToolCallRecord, Trajectory

    traj = Trajectory(run_id="bench", mode="sandbox", task=HEADER["task"], config={})
    if shape == "observations":
        per_step = 2 * len(json.dumps(CODE))  # the tool's output, and the same text in the conversation
        for i in range(1, max(1, size // per_step) + 1):
            call = ToolCallRecord(id=f"c{i}", name="execute_bash", arguments='{"command": "cat f.py"}', output=CODE)
            traj.add_step(StepRecord(index=i, started_at=0.0, tool_calls=[call]))
            traj.messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": CODE})
    else:
        vocab = [f"tok{i}" for i in range(500)]
        tokens = [{"token": vocab[t % 500], "logprob": -(t % 97) / 7.0,
                   "top": {vocab[(t + k) % 500]: -(k + t % 13) / 3.0 for k in range(20)}} for t in range(2000)]
        per_step = len(Trajectory(run_id="x", steps=[StepRecord(index=1, started_at=0.0, logprobs=tokens)]).to_json())
        for i in range(1, max(1, size // per_step) + 1):
            traj.add_step(StepRecord(index=i, started_at=0.0, content="...", logprobs=tokens))
    path.write_text(traj.to_json())


def _hostile(path: Path, size: int, shape: str) -> None:
    """A compact file of about `size` bytes, its bulk tiny values in one field."""
    item, where = {"dicts": ("{}", "task"), "messages": ("{}", "messages"),
                   "steps": ('{"index":1,"started_at":0}', "steps")}[shape]
    head = {k: v for k, v in HEADER.items() if k != where}
    count = size // (len(item) + 1)
    with open(path, "w") as f:
        f.write(json.dumps(head)[:-1])
        if where == "task":
            f.write(', "task": ' + json.dumps(HEADER["task"])[:-1] + ', "pad": [')
        else:
            f.write(f', "{where}": [')
        for left in range(count, 0, -100_000):
            f.write(",".join([item] * min(left, 100_000)) + ("," if left > 100_000 else ""))
        f.write("]}}" if where == "task" else "]}")


def build(out: Path, shape: str, mib: int) -> Path:
    run = out / f"{shape}-{mib}"
    path = run / "trajectory.json"
    if not path.exists():
        run.mkdir(parents=True, exist_ok=True)
        (_honest if shape in ("observations", "logprobs") else _hostile)(path, mib * MIB, shape)
    return run


LOAD = """
import json, resource, sys, time
from pathlib import Path
from insandbox.replay.replayer import load_recorded

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))

with open("/proc/self/clear_refs", "w") as f:  # the peak from here on (ru_maxrss counts what came before exec)
    f.write("5")
base = status("VmRSS")
t0 = time.perf_counter()
try:
    load_recorded(Path(sys.argv[1]))
    outcome = "loaded"
except Exception as e:
    outcome = "refused: " + str(e).splitlines()[0][-90:]
child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({"base": base, "peak": status("VmHWM"), "child": child, "seconds": time.perf_counter() - t0,
                  "outcome": outcome}))
"""


def measure(run: Path, cap: int) -> dict:
    """The load in a fresh process, killed if its resident memory passes `cap` (read from /proc every 5 ms:
    an address-space limit would be no use, pydantic-core can hang when an allocation is refused)."""
    p = subprocess.Popen([sys.executable, "-c", LOAD, str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    page = os.sysconf("SC_PAGE_SIZE")
    while p.poll() is None:
        try:
            with open(f"/proc/{p.pid}/statm") as f:
                held = int(f.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            held = 0
        if held > cap:
            p.kill()
            p.communicate()
            return {"outcome": f"over the cap ({cap / 1024 ** 3:.0f} GiB)"}
        time.sleep(0.005)
    out, err = p.communicate()
    if p.returncode != 0 or not out.strip():
        return {"outcome": "failed: " + (err.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="16,64,256", help="file sizes in MiB")
    ap.add_argument("--shapes", default="all", help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--out", type=Path, default=Path("/tmp/insandbox-bench-replay-memory"))
    ap.add_argument("--max-memory", type=float, default=12.0, help="GiB a load may take before it is stopped")
    args = ap.parse_args()
    shapes = SHAPES if args.shapes == "all" else tuple(args.shapes.split(","))
    cap = int(args.max_memory * 1024 ** 3)
    print(f"{'shape':<13} {'file MiB':>8} {'peak MiB':>9} {'peak/file':>9} {'child MiB':>9} {'s':>6}  outcome")
    for shape in shapes:
        for mib in (int(s) for s in args.sizes.split(",")):
            run = build(args.out, shape, mib)
            size = os.path.getsize(run / "trajectory.json")
            t0 = time.perf_counter()
            m = measure(run, cap)
            if "peak" not in m:
                print(f"{shape:<13} {size / MIB:8.0f} {'-':>9} {'-':>9} {'-':>9} {time.perf_counter() - t0:6.1f}  "
                      f"{m['outcome']}")
                continue
            held = m["peak"] - m["base"]
            print(f"{shape:<13} {size / MIB:8.0f} {held / MIB:9.0f} {held / size:9.1f} {m['child'] / MIB:9.0f} "
                  f"{m['seconds']:6.1f}  {m['outcome']}", flush=True)


if __name__ == "__main__":
    main()
