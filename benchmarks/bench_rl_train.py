"""The CPU smoke training on this machine: wall time, peak memory and where the time goes.

    .venv/bin/python benchmarks/bench_rl_train.py [--out DIR] [--max-steps N] [--data TASKS.jsonl]

Runs the manual's command (docs/rl/smoke.md), `insandbox rl train --preset smoke --out DIR`, as a child process and
samples the resident memory of its process tree (the trainer, the reward workers, pip or docker
CLIs it starts; the sandboxes' containers live under the Docker daemon and are not counted) every
0.2 s. Then reads what the run wrote: OUT/summary.json (load, rollouts, train, save) and
OUT/metrics.jsonl (per step: rollouts and the rest of the step, loss, reward mean and std,
groups with spread). Prints a Markdown table and writes it as JSON to OUT/bench.json.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            statm = Path(f"/proc/{entry}/statm").read_text().split()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
        rss[int(entry)] = int(statm[1]) * page
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo.extend(children.get(p, []))
    return total


def run(out: Path, max_steps: int | None, data: Path | None = None) -> dict:
    exe = Path(sys.executable).parent / "insandbox"
    command = [str(exe), "rl", "train", "--preset", "smoke", "--out", str(out)]
    if max_steps:
        command += ["--max-steps", str(max_steps)]
    if data:
        command += ["--data", str(data)]
    peak = {"rss": 0}
    t0 = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def sample() -> None:
        while child.poll() is None:
            peak["rss"] = max(peak["rss"], tree_rss(child.pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output = child.communicate()[0]
    wall = time.perf_counter() - t0
    sampler.join()
    if child.returncode != 0:
        raise SystemExit(f"the smoke training failed (rc {child.returncode}):\n{output[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {"command": " ".join(["insandbox", *command[1:]]), "wall_s": round(wall, 1),
            "peak_rss_gib": round(peak["rss"] / 2**30, 2), "phases": summary["phases"], "steps": steps,
            "console": [line for line in output.splitlines() if line.startswith("[train]")]}


def table(result: dict) -> str:
    p = result["phases"]
    rows = [("command", f"`{result['command']}`"), ("wall (whole command)", f"{result['wall_s']:.0f} s"),
            ("peak RSS, process tree", f"{result['peak_rss_gib']:.2f} GiB"),
            ("load: task rows, sandbox image, model from GGUF", f"{p['load_s']:.0f} s"),
            ("rollouts (all steps)", f"{p['rollout_s']:.0f} s"),
            ("optimizer steps: scoring, forward, backward, AdamW (all steps)", f"{p['train_s']:.0f} s"),
            ("final checkpoint", f"{p['save_s']:.0f} s")]
    for s in result["steps"]:
        rows.append((f"step {s['step']}", f"{s['time']['step_s']:.0f} s (rollouts {s['time']['rollout_s']:.0f} s, "
                                          f"train {s['time']['train_s']:.0f} s); loss {s['loss']:.4f}; reward "
                                          f"{s['reward_mean']:.3f} ± {s['reward_std']:.3f}; groups with spread "
                                          f"{s['groups_with_spread']}/{s['groups']}; exits {s['exit_reasons']}"))
    return "\n".join(["| what | figure |", "| --- | --- |"] + [f"| {a} | {b} |" for a, b in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="the run's folder (default: a temporary one)")
    parser.add_argument("--max-steps", type=int, help="override the preset's steps")
    parser.add_argument("--data", type=Path, help="task rows (`insandbox rl build-data`'s tasks.jsonl) instead of "
                                                  "the preset's four shipped rows")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="insandbox-bench-rl-train-"))
    result = run(out, args.max_steps, args.data)
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    print(f"machine: {os.cpu_count()} cores; load average at the end: {os.getloadavg()[0]:.1f} (other jobs slow it)")
    print(table(result))
    print(f"\nrun folder: {out}")


if __name__ == "__main__":
    main()
