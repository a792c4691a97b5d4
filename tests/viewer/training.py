"""A training folder as `insandbox rl train --out DIR` leaves it, written by the trainer's own writers (no model,
no sandbox): config.yaml from the smoke preset's config, metrics.jsonl rows from StepLog over batches summarised
by rl/rollout/summary.py, and rollouts/step-NNNNN.jsonl lines as the rollout hook writes them (each record's
model_dump_json, its trajectory the real Trajectory model's)."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import yaml

from insandbox.core.episode import ExitReason
from insandbox.core.trajectory import StepRecord, ToolCallRecord, Trajectory


def trajectory(run_id: str, task_id: str, steps: int, reason: Optional[str]) -> dict:
    traj = Trajectory(run_id=run_id, task={"id": task_id, "prompt": f"Solve {task_id}."},
                      config={"model": "synthetic-policy"},
                      messages=[{"role": "system", "content": "You have a computer."},
                                {"role": "user", "content": f"Solve {task_id}."}])
    for i in range(1, steps + 1):
        out = f"output of step {i}\n"
        traj.add_step(StepRecord(index=i, started_at=1.7e9 + i, model_latency_s=0.2, prompt_tokens=50 * i,
                                 completion_tokens=10, content=f"rollout step {i}",
                                 tool_calls=[ToolCallRecord(id=f"c{i}", name="execute_bash",
                                                            arguments=json.dumps({"command": f"echo {task_id}-{i}"}),
                                                            output=out, exit_code=0, output_chars=len(out))]))
    if reason is not None:
        traj.end(ExitReason(reason))
    return traj.model_dump(mode="json")


def records(step: int, tasks: tuple[str, ...] = ("t1", "t2"), n: int = 2,
            reasons: tuple[str, ...] = ("submitted", "max_steps", "submitted", "time_limit")) -> list:
    from insandbox.rl.rollout.types import RolloutRecord

    out = []
    for g, task in enumerate(tasks):
        for s in range(n):
            k = g * n + s
            reason = reasons[k % len(reasons)]
            out.append(RolloutRecord(
                id=f"{task}/g{g}/s{s}", task_id=task, group=g, sample=s, prompt_ids=[1, 2, 3],
                response_ids=[5, 6, 7, 8], response_mask=[1, 0, 0, 1], response_logprobs=[-0.5, None, None, -0.1],
                reward=round(0.25 * ((k + step) % 5), 2), exit_reason=reason, masked=reason == "time_limit",
                num_turns=2, tool_calls=2, timings={"wall_s": 3.0 + k, "env_s": 1.0, "generate_s": 1.5},
                trajectory=trajectory(f"{task}-g{g}-s{s}", task, steps=2 + s, reason=reason)))
    return out


def write_training(out: Path, steps: int = 3, max_steps: Optional[int] = None) -> Path:
    """A training of `steps` steps (of `max_steps`), each with 4 rollouts of 2 tasks; returns the folder."""
    from insandbox.rl.rollout.summary import summarize
    from insandbox.rl.trainers.config import load_config
    from insandbox.rl.trainers.metrics import StepLog
    from insandbox.rl.trainers.rollout_hook import RolloutBatch

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = load_config(None, {"preset": "smoke", "out": str(out)})
    (out / "config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    (out / "metrics.jsonl").write_text("", encoding="utf-8")
    batches = []
    log = StepLog(out, SimpleNamespace(batches=batches), echo=lambda line: None)
    for step in range(1, steps + 1):
        recs = records(step)
        path = out / "rollouts" / f"step-{step:05d}.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.write_text("".join(r.model_dump_json() + "\n" for r in recs), encoding="utf-8")
        summary = summarize(recs, wall_s=20.0 + step)
        batches.append(RolloutBatch(step=step, summary=summary, check_mismatches=0, rollout_s=20.0 + step,
                                    model_tokens=8, env_tokens=8, masked_truncated=0, records_file=str(path),
                                    masked=dict(summary["masked"]), broken_sandbox=0))
        log.step_s = 30.0 + step
        log.on_log(None, SimpleNamespace(global_step=step, max_steps=max_steps or steps, is_world_process_zero=True),
                   None, logs={"loss": 0.05 / step, "grad_norm": 0.5, "learning_rate": 1e-5})
    return out
