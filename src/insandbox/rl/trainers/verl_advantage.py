"""RLOO without the masked rollouts, as a verl advantage estimator: `algorithm.adv_estimator: insandbox_rloo`.

The agent loop gives a masked rollout (an infrastructure failure, the rollout's time limit: records
with `masked`) a response_mask of zeros, so the actor's loss never sees its tokens. verl's own
"rloo" would still put its reward (the error value) into the baseline of the other rollouts of
its group. Here a rollout whose response_mask is all zeros is left out of its group: each other
rollout's advantage is its reward minus the mean of the group's other *kept* rollouts, and a
masked rollout's advantage is 0. A group left with one kept rollout has no baseline: advantage 0
(verl's rloo would hand it its raw reward). Without masked rollouts it is verl's rloo exactly.

verl looks estimators up by name in the process that computes advantages (its trainer, on the head
node), so this module must be imported there: recipes/verl/run.sh exports
VERL_USE_EXTERNAL_MODULES=insandbox.rl.trainers.verl_advantage, which `import verl` honours in every
process. Without it verl stops at the first step with "Unknown advantage estimator". Importing this
module also puts verl_metrics.py in place: verl's logged critic/score and critic/rewards leave the
masked rollouts out, as the advantages do.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

from . import verl_metrics  # noqa: F401  (verl's logged score without the masked rollouts, in the same processes)

NAME = "insandbox_rloo"


def masked_rloo_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any,
                          epsilon: float = 1e-6, config: Any = None,
                          **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), both (batch, response_length): RLOO over each uid's kept rollouts."""
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        kept = response_mask.sum(dim=-1) > 0
        groups: dict[Any, list[int]] = defaultdict(list)
        for i in range(scores.shape[0]):
            if kept[i]:
                groups[index[i]].append(i)
        advantages = torch.zeros_like(scores)
        for members in groups.values():
            k = len(members)
            if k < 2:
                continue
            total = scores[members].sum()
            for i in members:
                advantages[i] = scores[i] - (total - scores[i]) / (k - 1)
        advantages = advantages.unsqueeze(-1) * response_mask
    return advantages, advantages


if NAME not in ADV_ESTIMATOR_REGISTRY:
    register_adv_est(NAME)(masked_rloo_advantage)
