"""Per-step metrics: one console line and one OUT/metrics.jsonl object per optimizer step.

A row joins what TRL logged for the step (loss, grad norm, learning rate, its reward figures,
under "trl": the rollouts' true rewards, the RLOO factor goes to the advantages) with the step's
rollout batch (reward mean and std from the records the loss learns from, rollouts per minute,
tool calls per rollout, exit reasons as counts, masked rollouts by exit reason, sandboxes broken
by their own processes, the sandbox's share of rollout time, the decode check) and where the time
went (rollouts, the rest of the step: scoring, forward, backward and the optimizer). TensorBoard
gets the same scalars through TRL's log.
"""
from __future__ import annotations

import json
import math
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from transformers import TrainerCallback

from .rollout_hook import SandboxRollouts

OWN_KEYS = ("loss", "grad_norm", "learning_rate", "epoch")


def _number(value: Any) -> Any:
    """JSON has no NaN: a missing figure is null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


class StepLog(TrainerCallback):
    def __init__(self, out: Path, hook: SandboxRollouts, echo: Callable[[str], None] = print):
        self.path = out / "metrics.jsonl"
        self.hook = hook
        self.echo = echo
        self.step_started: Optional[float] = None
        self.step_s = 0.0
        self.final: dict = {}
        self.rows: list[dict] = []

    def on_step_begin(self, args, state, control, **kwargs):
        self.step_started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self.step_started is not None:
            self.step_s = time.perf_counter() - self.step_started

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = dict(logs or {})
        if "loss" not in logs:  # the summary logged at the end of training (runtime, mean loss)
            self.final.update(logs)
            return
        if not state.is_world_process_zero:
            return
        row = self.row(state.global_step, state.max_steps, logs)
        self.rows.append(row)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        self.echo(console_line(row))

    def row(self, step: int, max_steps: int, logs: dict) -> dict:
        batch = next((b for b in reversed(self.hook.batches) if b.step == step), None)
        row: dict[str, Any] = {"step": step, "max_steps": max_steps}
        row.update({k: _number(logs.get(k)) for k in ("loss", "grad_norm", "learning_rate")})
        if batch is not None:
            s = batch.summary
            row.update({k: _number(s[k]) for k in (
                "reward_mean", "reward_std", "rollouts", "groups", "groups_with_spread", "rollouts_per_min",
                "tool_calls_per_rollout", "turns_per_rollout", "response_tokens_mean", "model_tokens_mean",
                "truncated", "sandbox_share", "generate_share")})
            row["exit_reasons"] = dict(s["exit_reasons"])
            row.update(check_mismatches=batch.check_mismatches, trained_tokens=batch.model_tokens,
                       env_tokens=batch.env_tokens, masked_truncated=batch.masked_truncated,
                       masked=dict(batch.masked), broken_sandbox=batch.broken_sandbox,
                       stale_dropped=batch.stale_dropped, staleness_max=batch.staleness_max, ahead=batch.ahead,
                       plan_mismatch=batch.plan_mismatch,
                       records=str(Path(batch.records_file).relative_to(self.path.parent)))
        rollout_s = batch.rollout_s if batch is not None else 0.0
        wait_s = batch.waited_s if batch is not None else 0.0  # synchronous: the rollouts' whole time
        row["time"] = {"step_s": round(self.step_s, 3), "rollout_s": round(rollout_s, 3),
                       "train_s": round(max(self.step_s - wait_s, 0.0), 3)}
        if batch is not None and batch.ahead:  # produced while earlier steps trained: the step waited this long
            row["time"]["rollout_wait_s"] = round(wait_s, 3)
        row["max_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        row["trl"] = {k: _number(v) for k, v in logs.items()
                      if k not in OWN_KEYS and not k.startswith(("rollout/", "time/"))}
        return row


def console_line(row: dict) -> str:
    def num(key: str, fmt: str = ".4g") -> str:
        value = row.get(key)
        return "-" if value is None else format(value, fmt)

    parts = [f"step {row['step']}/{row['max_steps']}", f"loss {num('loss')}", f"grad {num('grad_norm', '.3g')}",
             f"lr {num('learning_rate', '.3g')}"]
    if "reward_mean" in row:
        exits = " ".join(f"{k} {v}" for k, v in sorted(row["exit_reasons"].items()))
        share = row.get("sandbox_share")
        parts += [f"reward {num('reward_mean', '.3f')} ± {num('reward_std', '.3f')}",
                  f"spread {row['groups_with_spread']}/{row['groups']} groups",
                  f"{row['rollouts']} rollouts {num('rollouts_per_min', '.3g')}/min",
                  f"tools {num('tool_calls_per_rollout', '.2f')}/rollout", f"exits: {exits}"]
        if row.get("masked"):
            parts.append("masked " + " ".join(f"{k} {v}" for k, v in sorted(row["masked"].items())))
        if row.get("broken_sandbox"):
            parts.append(f"broken sandboxes {row['broken_sandbox']}")
        if row.get("stale_dropped"):
            parts.append(f"stale dropped {row['stale_dropped']}")
        parts += [f"sandbox {'-' if share is None else format(share, '.0%')}",
                  f"check {'ok' if not row['check_mismatches'] else str(row['check_mismatches']) + ' bad'}"]
    t = row["time"]
    if "rollout_wait_s" in t:
        parts.append(f"{t['step_s']:.0f}s (rollouts ahead {t['rollout_s']:.0f}s, waited {t['rollout_wait_s']:.0f}s, "
                     f"train {t['train_s']:.0f}s)")
    else:
        parts.append(f"{t['step_s']:.0f}s (rollouts {t['rollout_s']:.0f}s, train {t['train_s']:.0f}s)")
    return "[train] " + " | ".join(parts)
