"""Synthetic run folders of any size, written with the real Trajectory model (for the index and paging
tests and benchmarks/bench_viewer.py; the browser tests use folders recorded by real runs)."""
from __future__ import annotations

import json
from pathlib import Path

from insandbox.core.episode import ExitReason
from insandbox.core.trajectory import StepRecord, ToolCallRecord, Trajectory


def write_run(run_dir: Path, steps: int = 3, output_chars: int = 200, finished: bool = True,
              model: str = "synthetic-model", task_id: str = "") -> Trajectory:
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    traj = Trajectory(run_id=run_dir.name, config={"model": model}, task={"id": task_id, "prompt": "Count to three."},
                      messages=[{"role": "system", "content": "You have a computer."},
                                {"role": "user", "content": "Count to three."}])
    for i in range(1, steps + 1):
        out = (f"line {i}\n" * (output_chars // 7 + 1))[:output_chars]
        traj.add_step(StepRecord(index=i, started_at=1.7e9 + i, model_latency_s=0.5, tool_time_s=0.1,
                                 prompt_tokens=100 * i, completion_tokens=20, content=f"step {i} reply",
                                 tool_calls=[ToolCallRecord(id=f"c{i}", name="execute_bash",
                                                            arguments=json.dumps({"command": f"echo step-{i}"}),
                                                            output=out, exit_code=0, output_chars=len(out),
                                                            duration_s=0.1)]))
    if finished:
        traj.end(ExitReason.SUBMITTED)
    traj.save(run_dir / "trajectory.json")
    return traj


def write_files(folder: Path, n: int) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"f{i:06d}.txt").write_text(str(i))
