"""Synchronous against asynchronous rollouts on the CPU smoke training: the same preset, seed and steps,
grpo.async_steps 0 and 1.

    .venv/bin/python benchmarks/bench_async_rl.py [--steps N] [--data TASKS.jsonl] [--out DIR]

Runs `insandbox rl train --preset smoke --train-steps N --async-steps K --out DIR/kK` for K = 0 then 1, one
after the other, each as a child process, and reads what each run wrote (OUT/summary.json, OUT/metrics.jsonl).
Prints a Markdown table per run and one over both:

    rollouts per minute    rollouts over the time from the first step's start to the last step's end
    wall                   the whole command (loading, steps, final checkpoint)
    waiting for rollouts   the steps' time spent waiting for their rollout batch (synchronous: all of it)
    reward per step        the mean reward of each step's batch (the reward curve)

On a machine with few cores the producer's sampling competes with the trainer for them, so what
asynchrony saves is bounded by the cores there are to overlap on.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(out: Path, steps: int, k: int, data: Path | None) -> dict:
    exe = Path(sys.executable).parent / "insandbox"
    command = [str(exe), "rl", "train", "--preset", "smoke", "--train-steps", str(steps), "--async-steps", str(k),
               "--out", str(out)]
    if data:
        command += ["--data", str(data)]
    t0 = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"async_steps {k}: the training failed (rc {done.returncode}):\n"
                         f"{(done.stdout + done.stderr)[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps_s = sum(r["time"]["step_s"] for r in rows)
    waited = sum(r["time"].get("rollout_wait_s", r["time"]["rollout_s"]) for r in rows)
    rollouts = sum(r["rollouts"] for r in rows)
    return {"k": k, "command": " ".join(["insandbox", *command[1:]]), "wall_s": round(wall, 1),
            "steps_s": round(steps_s, 1), "rollouts": rollouts,
            "rollouts_per_min": round(rollouts / steps_s * 60, 2) if steps_s else None,
            "rollout_wait_s": round(waited, 1), "sampling_s": summary["phases"]["rollout_s"],
            "stale_dropped": summary["stale_dropped"], "async": summary["async"],
            "rewards": [r["reward_mean"] for r in rows], "losses": [r["loss"] for r in rows],
            "staleness": [r.get("staleness_max") for r in rows],
            "console": [line for line in done.stdout.splitlines() if line.startswith("[train]")]}


def table(results: list[dict]) -> str:
    def cell(result: dict, what: str) -> str:
        if what == "rewards":
            return " → ".join(f"{r:.3f}" for r in result["rewards"])
        if what == "staleness":
            return ", ".join("-" if s is None else str(s) for s in result["staleness"])
        value = result[what]
        return "-" if value is None else f"{value:g}"

    lines = ["| | " + " | ".join(f"async_steps {r['k']}" for r in results) + " |",
             "| --- |" + " --- |" * len(results)]
    for label, what in (("rollouts per minute (steps' time)", "rollouts_per_min"),
                        ("wall, whole command (s)", "wall_s"), ("steps' time (s)", "steps_s"),
                        ("waiting for rollouts (s)", "rollout_wait_s"),
                        ("sampling, all batches (s)", "sampling_s"), ("rollouts", "rollouts"),
                        ("stale records dropped", "stale_dropped"), ("staleness per step (versions)", "staleness"),
                        ("reward per step", "rewards")):
        lines.append(f"| {label} | " + " | ".join(cell(r, what) for r in results) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps of each run")
    parser.add_argument("--data", type=Path, help="task rows instead of the smoke preset's four shipped rows")
    parser.add_argument("--out", type=Path, help="where the runs go (default: a temporary folder)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="insandbox-bench-async-rl-"))
    results = []
    for k in (0, 1):
        results.append(run(out / f"k{k}", args.steps, k, args.data))
        print(f"[bench] async_steps {k}: {results[-1]['command']}", flush=True)
        for line in results[-1]["console"]:
            print("   " + line, flush=True)
    (out / "bench.json").write_text(json.dumps(results, indent=1))
    print(f"\nmachine: {os.cpu_count()} cores; load average at the end: {os.getloadavg()[0]:.1f} "
          "(other jobs slow it)")
    print(table(results))
    print(f"\nruns: {out}")


if __name__ == "__main__":
    main()
