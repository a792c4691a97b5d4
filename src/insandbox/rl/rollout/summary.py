"""Figures over a batch of rollouts: what the trainer logs each step and `rl rollout` writes.

The reward figures (mean, std, groups with spread) are over the rollouts a trainer learns from:
masked ones (infrastructure failures, time limits) are counted apart, under "masked"."""
from __future__ import annotations

import math
from collections import Counter

from .types import RolloutRecord


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _std(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    m = _mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def summarize(records: list[RolloutRecord], wall_s: float) -> dict:
    # the rewards trainers learn from: a masked rollout's (the error value) is no reward at all
    rewards = [r.reward for r in records if not r.masked]
    groups: dict[tuple[str, int], list[float]] = {}
    for r in records:
        kept = groups.setdefault((r.task_id, r.group), [])
        if not r.masked:
            kept.append(r.reward)
    busy = sum(r.timings.get("wall_s", 0.0) for r in records)
    return {
        "rollouts": len(records),
        "wall_s": round(wall_s, 3),
        "rollouts_per_min": round(len(records) / wall_s * 60, 2) if wall_s > 0 else None,
        "reward_mean": _mean(rewards),
        "reward_std": _std(rewards),
        "groups": len(groups),
        "groups_with_spread": sum(1 for v in groups.values() if len(set(v)) > 1),  # GRPO learns only from these
        "tool_calls_per_rollout": _mean([r.tool_calls for r in records]),
        "turns_per_rollout": _mean([r.num_turns for r in records]),
        "response_tokens_mean": _mean([len(r.response_ids) for r in records]),
        "model_tokens_mean": _mean([sum(r.response_mask) for r in records]),
        "truncated": sum(1 for r in records if r.truncated),
        "exit_reasons": dict(Counter(r.exit_reason or "none" for r in records)),
        # left out of the loss, by exit reason (time_limit, model_error, an engine's sandbox_error...)
        "masked": dict(Counter(r.exit_reason or "none" for r in records if r.masked)),
        "broken_sandbox": sum(1 for r in records if r.exit_cause == "sandbox"),  # trained on, penalised
        # where a rollout's time went: sampling, the sandbox (start wait, tool calls, answer), the rest
        "sandbox_share": sum(r.timings.get("env_s", 0.0) for r in records) / busy if busy else math.nan,
        "generate_share": sum(r.timings.get("generate_s", 0.0) for r in records) / busy if busy else math.nan,
    }
