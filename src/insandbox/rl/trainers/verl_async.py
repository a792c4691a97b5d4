"""insandbox's agent loop for verl's fully asynchronous trainer (verl.experimental.fully_async_policy).

There, a rollouter keeps sampling while the trainer trains, and the trainer pushes its weights to
the rollout servers every `async_training.trigger_parameter_sync_step` steps; each push raises the
servers' parameter version. verl bounds staleness by pausing the rollouter once too many samples
are in flight or queued (`staleness_threshold`), and by evicting the oldest group when its queue is
full (counted in verl's `fully_async/count/dropped_stale_samples`). It never drops a rollout for its
age: with `partial_rollout`, a turn cut by a weight sync is resumed on the new weights, so one long
agentic rollout (up to 100 turns, an hour) can span many versions.

This loop is InSandboxAgentLoop plus that missing bound, per rollout:

    policy_versions   verl's parameter version per model turn (the oldest, for a turn resumed after a sync)
    current           the newest version any rollout of this process has seen (every server output says it)
    staleness         current - the record's policy_version (its oldest turn), when the rollout ends
    max_staleness     the bound (agent-loop YAML; null: keep all); past it the rollout is dropped

A dropped rollout stays in its group with a response_mask of zeros, as a masked one does (its
shape keeps verl's group of rollout.n intact): the actor's loss never sees it, the recipe's
estimator (insandbox_rloo) leaves it out of the baseline, and verl_metrics.py counts it as
`rollout/stale_dropped`. A record of unknown version is dropped too once a bound is set
(insandbox.rl.rollout.staleness.split_stale); one already masked (a failure) is left as it is.

The recipe's agent-loop YAML (recipes/verl/agent_loop_async.yaml) names this class under the name
the dataset rows carry ("insandbox"), so verl_data.py's parquet selects it unchanged; it is also
registered as "insandbox_async".
"""
from __future__ import annotations

from typing import Any, Optional

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from ..rollout.staleness import split_stale
from ..rollout.types import RolloutRecord
from .verl_agent_loop import InSandboxAgentLoop, register_unless_configured
from .verl_metrics import STALE_KEY  # reward_extra_info: 1.0 for a rollout dropped past the bound
from .verl_sampler import ServerManagerSampler

ASYNC_AGENT_NAME = "insandbox_async"


class VersionClock:
    """The newest parameter version seen in this process (each agent-loop worker is a process of its own)."""

    def __init__(self) -> None:
        self.latest: Optional[int] = None

    def observe(self, version: int) -> None:
        if self.latest is None or version > self.latest:
            self.latest = int(version)


CLOCK = VersionClock()


@register_unless_configured(ASYNC_AGENT_NAME)
class InSandboxAsyncAgentLoop(InSandboxAgentLoop):
    def __init__(self, *args: Any, max_staleness: Optional[int] = None, **kwargs: Any):
        if max_staleness is not None and int(max_staleness) < 0:
            raise ValueError(f"max_staleness must be >= 0 (or null), not {max_staleness}")
        self.max_staleness = None if max_staleness is None else int(max_staleness)
        super().__init__(*args, **kwargs)

    def _sampler(self, sampling_params: dict[str, Any], request_id: str) -> ServerManagerSampler:
        return ServerManagerSampler(self.server_manager, sampling_params, request_id, observe=CLOCK.observe)

    def _output(self, record: RolloutRecord, sampler: ServerManagerSampler, request_id: str) -> AgentLoopOutput:
        output = super()._output(record, sampler, request_id)
        current = CLOCK.latest
        if current is None:  # nothing sampled in this process yet: the record cannot be older than itself
            current = record.policy_version if record.policy_version is not None else 0
        # a masked rollout is out of the loss already (a failure, often before any turn): not judged by age
        stale = not record.masked and split_stale([record], current, self.max_staleness).dropped > 0
        info = output.extra_fields["reward_extra_info"]
        info[STALE_KEY] = float(stale)
        if stale:
            output.response_mask = [0] * len(output.response_mask)
            info["masked"] = 1.0  # out of the loss, the baseline and the logged score, like any masked rollout
        extra = output.extra_fields
        extra["staleness"] = None if record.policy_version is None else current - record.policy_version
        extra["current_version"] = current
        # verl's batch assembly subtracts these for every row: a rollout that sampled nothing gets the clock's
        for key in ("min_global_steps", "max_global_steps"):
            if extra.get(key) is None:
                extra[key] = current
        return output

    def _record_tags(self, output: AgentLoopOutput) -> dict[str, Any]:
        extra = output.extra_fields
        return {"staleness": extra["staleness"], "current_version": extra["current_version"],
                "max_staleness": self.max_staleness, STALE_KEY: bool(extra["reward_extra_info"][STALE_KEY])}
