"""The reward function TRL calls: the rollout already scored each record, so it hands those
rewards on (scaled for RLOO, see grpo_args.rewards_for_trl), and logs the batch's rollout figures
through TRL's log_metric, so they land beside TRL's own in the same logs and event files."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from .config import TrainConfig
from .grpo_args import rewards_for_trl
from .rollout_hook import SandboxRollouts, batch_metrics


def make_reward_func(hook: SandboxRollouts, config: TrainConfig) -> Callable[..., list[float]]:
    def insandbox_reward(prompts: list, completions: list, completion_ids: list, rollout_reward: list[float],
                         log_metric: Optional[Callable[[str, float], None]] = None, **_: Any) -> list[float]:
        batch, hook.unlogged = hook.unlogged, None
        if batch is not None and log_metric is not None:
            for name, value in batch_metrics(batch).items():
                log_metric(name, value)
        return rewards_for_trl(list(rollout_reward), config)

    return insandbox_reward
