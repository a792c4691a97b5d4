"""TRL's GRPOTrainer with RLOO advantages over the scored rollouts of each group.

The reward function (reward_func.py) hands TRL each record's true reward, or None for a masked
rollout (an infrastructure failure, a time limit): TRL then leaves it out of its group's mean and
gives it advantage 0, and the rollout hook has zeroed its loss mask. TRL's advantage is the reward
minus the mean of the group's scored rollouts; RLOO's baseline is the mean of the *other* scored
rollouts, which gives the same difference times k/(k-1) for k scored rollouts (grpo_args.rloo_factors).
That factor is applied here to the advantages TRL computed, so the rewards TRL logs (`trl.reward`,
`train/reward` in TensorBoard) are the rollouts' own, not scaled ones.

It overrides GRPOTrainer._generate_and_score_completions (TRL 1.16, pinned below 2): TRL calls it
once per rollout batch, after our rollout_func, and its `advantages` are this process's slice, in
the order of the records the hook returned.
"""
from __future__ import annotations

from typing import Any

import torch
from trl import GRPOTrainer

from .grpo_args import rloo_factors
from .rollout_hook import SandboxRollouts


class InSandboxGRPOTrainer(GRPOTrainer):
    def __init__(self, *args: Any, hook: SandboxRollouts, advantage: str = "rloo", **kwargs: Any):
        super().__init__(*args, rollout_func=hook, **kwargs)
        self.insandbox_hook = hook
        self.insandbox_advantage = advantage

    def _generate_and_score_completions(self, inputs: list[dict]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        scored = self.insandbox_hook.last_scored
        if self.insandbox_advantage == "rloo" and self.model.training and scored:
            advantages = output["advantages"]
            if len(scored) != advantages.shape[0]:  # never silently misaligned
                raise RuntimeError(f"{len(scored)} rollout records for {advantages.shape[0]} advantages")
            factors = torch.tensor(rloo_factors(scored, self.num_generations), dtype=advantages.dtype,
                                   device=advantages.device)
            output["advantages"] = advantages * factors
        return output
