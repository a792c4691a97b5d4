"""verl's server manager as a rollout sampler: the GenerateFn of one rollout, token ids in and out.

verl hands every agent loop a server manager whose `generate(request_id=..., prompt_ids=...,
sampling_params=...)` returns a TokenOutput (token_ids, log_probs) from its rollout servers (vLLM
or SGLang, the weights the actor just trained). One rollout keeps one request id for all its turns,
so verl's load balancer routes them to the same server and its prefix cache holds the context.

verl's sampling params (temperature, top_p, top_k, logprobs; greedy for validation) are kept as
given; the rollout adds what only it knows: the turn's token budget and its end-of-turn token.
"""
from __future__ import annotations

from typing import Any, Optional

from ..rollout.types import Sampled, SamplingParams


class ServerManagerSampler:
    def __init__(self, server_manager: Any, sampling_params: dict[str, Any], request_id: str):
        self.server_manager = server_manager
        self.sampling_params = dict(sampling_params)
        self.request_id = request_id
        self.requests = 0
        self.num_preempted: Optional[int] = None  # summed over turns when the server reports it
        self.min_global_steps: Any = None  # the policy version of the first and the last turn (verl's staleness tags)
        self.max_global_steps: Any = None

    async def __call__(self, context: list[int], params: SamplingParams) -> Sampled:
        request = dict(self.sampling_params)  # a fresh dict per turn: servers pop keys from it
        request["max_tokens"] = params.max_tokens
        stops = list(dict.fromkeys([*(request.get("stop_token_ids") or []), *params.stop_token_ids]))
        request["stop_token_ids"] = stops
        output = await self.server_manager.generate(request_id=self.request_id, prompt_ids=list(context),
                                                    sampling_params=request)
        self.requests += 1
        if output.stop_reason == "aborted":
            raise RuntimeError("the rollout server aborted the request")
        if output.num_preempted is not None:
            self.num_preempted = (self.num_preempted or 0) + output.num_preempted
        extra = output.extra_fields or {}
        if self.requests == 1:
            self.min_global_steps = extra.get("min_global_steps", extra.get("global_steps"))
        self.max_global_steps = extra.get("max_global_steps", extra.get("global_steps"))
        ids = list(output.token_ids)
        logprobs = list(output.log_probs) if output.log_probs is not None else None
        return Sampled(ids, logprobs, "stop" if ids and ids[-1] in stops else "length")
