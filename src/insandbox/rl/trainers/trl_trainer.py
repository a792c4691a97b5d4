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

Off-policy tokens (grpo.async_steps >= 1: sampled by weights of version v older than the trainer's
current step) get truncated importance sampling: each such token's loss is weighted by
min(pi_current(token) / pi_sampler(token), grpo.importance_cap). pi_sampler is the record's logprob
(the sampler's, at the sampling temperature: policy_sampler.py), pi_current TRL's own forward of the
batch at the weights it trains from (also divided by the temperature), before any update of this
batch. Environment tokens and on-policy tokens get weight 1. TRL 1.16 has this correction
(vllm_importance_sampling_correction) only when it samples with vLLM itself (`use_vllm`), not for a
rollout_func's logprobs, so it is done here: the weights multiply the advantages per token, which
for TRL's losses (a clipped ratio times the advantage, positive weights) is the same as multiplying
each token's loss. Nothing off-policy (k = 0): no extra forward, the advantages stay as they were.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from trl import GRPOTrainer

from .grpo_args import rloo_factors
from .rollout_hook import SandboxRollouts


class InSandboxGRPOTrainer(GRPOTrainer):
    def __init__(self, *args: Any, hook: SandboxRollouts, advantage: str = "rloo", importance_cap: float = 2.0,
                 **kwargs: Any):
        super().__init__(*args, rollout_func=hook, **kwargs)
        self.insandbox_hook = hook
        self.insandbox_advantage = advantage
        self.insandbox_importance_cap = importance_cap

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
        if self.model.training:
            self._correct_off_policy(output)
        return output

    def _correct_off_policy(self, output: dict[str, Any]) -> None:
        """Truncated importance weights for the tokens sampled by older weights, folded into the advantages."""
        versions = self.insandbox_hook.last_token_versions
        sampled = output.get("sampling_per_token_logps")
        completion_mask = output["completion_mask"]
        current = self.state.global_step
        off_policy = off_policy_mask(versions, current, completion_mask.shape, completion_mask.device)
        if sampled is None or not bool(off_policy.any()):
            return
        loss_mask = completion_mask * output["tool_mask"] if "tool_mask" in output else completion_mask
        current_logps = output.get("old_per_token_logps")
        if current_logps is None:  # TRL computes it only when the batch spans several updates
            prompt_completion = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
            attention = torch.cat([output["prompt_mask"], completion_mask], dim=1)
            with torch.no_grad():
                current_logps, _, _ = self._get_per_token_logps_and_entropies(
                    self.model, prompt_completion, attention, output["completion_ids"].size(1),
                    batch_size=self.args.per_device_train_batch_size)
        weights, stats = importance_weights(current_logps, sampled, off_policy & loss_mask.bool(),
                                            self.insandbox_importance_cap)
        advantages = output["advantages"]
        output["advantages"] = (advantages.unsqueeze(1) if advantages.dim() == 1 else advantages) * weights
        for name, value in stats.items():
            self._metrics["train"][f"off_policy/{name}"].append(value)


def off_policy_mask(versions: list[list[Optional[int]]], current: int, shape: torch.Size,
                    device: Any = None) -> torch.Tensor:
    """(B, T) bool: the completion tokens sampled by a version older than `current` (padding: False)."""
    mask = torch.zeros(shape, dtype=torch.bool, device=device)
    for row, per_token in enumerate(versions[:shape[0]]):
        for col, version in enumerate(per_token[:shape[1]]):
            if version is not None and version < current:
                mask[row, col] = True
    return mask


def importance_weights(current_logps: torch.Tensor, sampler_logps: torch.Tensor, off_policy: torch.Tensor,
                       cap: float) -> tuple[torch.Tensor, dict[str, float]]:
    """Per token: min(exp(current - sampler), cap) where `off_policy` (and the sampler's logprob is known),
    1 elsewhere; and figures over the corrected tokens (count, mean and max of the uncut ratio, share cut)."""
    known = off_policy & torch.isfinite(sampler_logps)
    log_ratio = torch.where(known, current_logps.float() - torch.nan_to_num(sampler_logps.float()), 0.0)
    ratio = torch.exp(log_ratio.clamp(max=20.0))  # no overflow; the cap cuts far below
    weights = torch.where(known, ratio.clamp(max=cap), torch.ones_like(ratio)).to(current_logps.dtype)
    n = int(known.sum())
    stats = {"tokens": float(n)}
    if n:
        corrected = ratio[known]
        stats.update(ratio_mean=float(corrected.mean()), ratio_max=float(corrected.max()),
                     capped=float((corrected > cap).float().mean()))
    return weights.detach(), stats
