"""verl's server manager as a rollout sampler: the GenerateFn of one rollout, token ids in and out.

verl hands every agent loop a server manager whose `generate(request_id=..., prompt_ids=...,
sampling_params=...)` returns a TokenOutput (token_ids, log_probs) from its rollout servers (vLLM
or SGLang, the weights the actor just trained). One rollout keeps one request id for all its turns,
so verl's load balancer routes them to the same server and its prefix cache holds the context.

verl's sampling params (temperature, top_p, top_k, logprobs; greedy for validation) are kept as
given; the rollout adds what only it knows: the turn's token budget and its end-of-turn token.

Policy versions: verl tags every server's output with the parameter version its weights carry
(`global_steps`, set by each weight sync; the fully asynchronous trainer's param version). A turn
that a weight sync interrupted and verl resumed (fully async, partial_rollout) reports the oldest
and the newest version that sampled its tokens (`min_global_steps`, `max_global_steps`); the turn's
version is the oldest, so a record's version (the oldest of its turns) never looks fresher than
the weights that sampled any of its tokens.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from ...core.errors import ModelError
from ..rollout.types import Sampled, SamplingParams


class ServerManagerSampler:
    def __init__(self, server_manager: Any, sampling_params: dict[str, Any], request_id: str,
                 observe: Optional[Callable[[int], None]] = None):
        self.server_manager = server_manager
        self.observe = observe  # told the newest version of every output (verl_async.py's clock)
        self.sampling_params = dict(sampling_params)
        self.request_id = request_id
        self.requests = 0
        self.num_preempted: Optional[int] = None  # summed over turns when the server reports it
        self.min_global_steps: Optional[int] = None  # the oldest and newest version over all turns (verl's tags)
        self.max_global_steps: Optional[int] = None

    async def __call__(self, context: list[int], params: SamplingParams) -> Sampled:
        request = dict(self.sampling_params)  # a fresh dict per turn: servers pop keys from it
        request["max_tokens"] = params.max_tokens
        stops = list(dict.fromkeys([*(request.get("stop_token_ids") or []), *params.stop_token_ids]))
        request["stop_token_ids"] = stops
        output = await self.server_manager.generate(request_id=self.request_id, prompt_ids=list(context),
                                                    sampling_params=request)
        self.requests += 1
        if output.num_preempted is not None:
            self.num_preempted = (self.num_preempted or 0) + output.num_preempted
        oldest, newest = turn_versions(output.extra_fields or {})
        if oldest is not None:
            self.min_global_steps = oldest if self.min_global_steps is None else min(self.min_global_steps, oldest)
        if newest is not None:
            self.max_global_steps = newest if self.max_global_steps is None else max(self.max_global_steps, newest)
            if self.observe is not None:
                self.observe(newest)
        if output.stop_reason in ("aborted", "abort"):  # a model-server failure (model_error), not insandbox's
            raise ModelError("the rollout server aborted the request (a weight sync without partial_rollout?)")
        ids = list(output.token_ids)
        logprobs = list(output.log_probs) if output.log_probs is not None else None
        return Sampled(ids, logprobs, "stop" if ids and ids[-1] in stops else "length", policy_version=oldest)


def turn_versions(extra: dict[str, Any]) -> tuple[Optional[int], Optional[int]]:
    """(oldest, newest) parameter version of one server output; None where the server gave none."""
    now = _version(extra.get("global_steps"))
    oldest, newest = _version(extra.get("min_global_steps")), _version(extra.get("max_global_steps"))
    return (oldest if oldest is not None else now), (newest if newest is not None else now)


def _version(value: Any) -> Optional[int]:
    return None if value is None else int(value)
