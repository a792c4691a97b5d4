"""verl's logged score without the masked rollouts.

verl logs `critic/score/{mean,max,min}` and `critic/rewards/{mean,max,min}` (its compute_data_metrics)
over every rollout of the step that has a response. A masked rollout (an infrastructure failure, a
time limit spent waiting on the sampler: verl_agent_loop.py gives it a response_mask of zeros) carries
the reward config's error value, which says nothing about the model, and pulled the logged mean toward
it (-0.094 logged against a true -0.150). Here verl's compute_data_metrics is wrapped so those six
metrics are over the rollouts the loss sees; every other metric is verl's own, and
`insandbox/masked_rollouts` counts the rollouts left out. Without masked rollouts the metrics are
verl's exactly. Under verl's fully asynchronous trainer, the rollouts dropped for their age are masked
ones too; `rollout/stale_dropped` counts them apart, beside verl's own evictions (staleness_counts).

A rollout is masked when the batch's `masked` column (reward_extra_info, verl's legacy trainer keeps
it) says so, else when its response_mask is all 0 (the V1 trainer's metrics batch holds the masks only),
the same test the advantage estimator uses (verl_advantage.py).

verl's trainers import compute_data_metrics by name, so the wrapper replaces it in verl's metric_utils
and in every module already loaded that holds it; verl_advantage.py imports this module, so
VERL_USE_EXTERNAL_MODULES=insandbox.rl.trainers.verl_advantage (recipes/verl/run.sh) installs it in the
trainer's process as `import verl` runs, before the trainer's modules load.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo import metric_utils

SCORED = ("critic/score", "critic/rewards")
STALE_KEY = "stale_dropped"  # the agent loop's reward_extra_info column (verl_async.py)
VERL_DROPPED = "fully_async/count/dropped_stale_samples"  # verl's rollout status, in the batch's meta_info


def kept_rows(batch: Any) -> torch.Tensor:
    """A bool per rollout: True for those the loss sees (not masked, with a response)."""
    response_mask = batch.batch["response_mask"]
    masked = batch.non_tensor_batch.get("masked") if batch.non_tensor_batch else None
    if masked is not None and len(masked) == response_mask.shape[0]:
        kept = ~torch.as_tensor(np.asarray(masked, dtype=np.float64) > 0)
    else:
        kept = response_mask.sum(-1) > 0
    return kept & (_response_lengths(batch) > 0)  # verl's own rule: a row without a response does not count


def _response_lengths(batch: Any) -> torch.Tensor:
    """Tokens of each response, as verl's metrics count them (its lengths where given, else its attention mask)."""
    if "response_length" in batch.batch.keys():
        return batch.batch["response_length"]
    width = batch.batch["responses"].shape[-1]
    return batch.batch["attention_mask"][:, -width:].sum(-1)


def staleness_counts(batch: Any) -> dict[str, Any]:
    """The fully asynchronous trainer's drops (verl_async.py): `rollout/stale_dropped`, the rollouts of
    this batch past the agent loop's max_staleness; `rollout/stale_dropped_by_verl`, the groups verl's
    own message queue evicted when full, so far (its rollout status, when the batch carries it).
    Nothing for a batch of the synchronous recipe."""
    out: dict[str, Any] = {}
    column = batch.non_tensor_batch.get(STALE_KEY) if batch.non_tensor_batch else None
    if column is not None:
        out["rollout/stale_dropped"] = int((np.asarray(column, dtype=np.float64) > 0).sum())
    verls = (batch.meta_info or {}).get(VERL_DROPPED)
    if verls is not None:
        out["rollout/stale_dropped_by_verl"] = int(verls)
    return out


def without_masked(metrics: dict[str, Any], batch: Any) -> dict[str, Any]:
    """verl's `metrics` of `batch`, the score and reward statistics taken over the kept rollouts only."""
    kept = kept_rows(batch)
    left_out = int((~kept).sum()) - int((_response_lengths(batch) <= 0).sum())
    stale = staleness_counts(batch)
    if left_out <= 0:
        return dict(metrics, **stale) if stale else metrics
    out = dict(metrics, **{"insandbox/masked_rollouts": left_out}, **stale)
    for name, key in zip(SCORED, ("token_level_scores", "token_level_rewards")):
        values = batch.batch[key].sum(-1)[kept]
        stats = (values.mean().item(), values.max().item(), values.min().item()) if values.numel() else \
            (float("nan"),) * 3
        out.update({f"{name}/mean": stats[0], f"{name}/max": stats[1], f"{name}/min": stats[2]})
    return out


_verls = getattr(metric_utils.compute_data_metrics, "__wrapped__", metric_utils.compute_data_metrics)


def compute_data_metrics(batch: Any, use_critic: bool = True) -> dict[str, Any]:
    """verl's compute_data_metrics, its score and reward statistics without the masked rollouts."""
    return without_masked(_verls(batch=batch, use_critic=use_critic), batch)


compute_data_metrics.__wrapped__ = _verls  # type: ignore[attr-defined]


def install() -> None:
    """Put the wrapper where verl's trainers look it up (again: harmless)."""
    metric_utils.compute_data_metrics = compute_data_metrics
    for module in list(sys.modules.values()):
        if (getattr(module, "__dict__", None) or {}).get("compute_data_metrics") is _verls:  # no module __getattr__
            module.compute_data_metrics = compute_data_metrics


install()
