"""The reward function TRL calls: the rollout already scored each record, so it hands TRL the
records' own rewards (None for a masked rollout: TRL then gives it no advantage and leaves it out
of its group's mean; the RLOO factor is applied to the advantages, trl_trainer.py), and logs the
batch's rollout figures through TRL's log_metric, so they land beside TRL's own in the same logs and
event files."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from .rollout_hook import SandboxRollouts, batch_metrics


def make_reward_func(hook: SandboxRollouts) -> Callable[..., list[Optional[float]]]:
    def insandbox_reward(prompts: list, completions: list, completion_ids: list, rollout_reward: list[float],
                         rollout_scored: Optional[list[bool]] = None,
                         log_metric: Optional[Callable[[str, float], None]] = None,
                         **_: Any) -> list[Optional[float]]:
        batch, hook.unlogged = hook.unlogged, None
        if batch is not None and log_metric is not None:
            for name, value in batch_metrics(batch).items():
                log_metric(name, value)
        scored = rollout_scored if rollout_scored is not None else [True] * len(rollout_reward)
        return [float(r) if ok else None for r, ok in zip(rollout_reward, scored)]

    return insandbox_reward
