"""The trainer's model as the rollout sampler, with a prefix cache of attention keys and values.

Every turn of a rollout sends the whole context again (prompt, earlier turns, observations), and
the rollouts of a group share their prompt. Without a cache each turn recomputes all of it, which
on a CPU costs more than the sampling. Here the cache a generation leaves behind is kept under
the token ids it covers; the next request starts from a copy of the kept cache that shares the
longest prefix with its context (cut to that prefix), so only the new tokens are computed.

A cache belongs to one set of weights. Synchronously (grpo.async_steps 0) the rollout hook makes a
new sampler for every rollout batch, after the optimizer changed them, stamped with the trainer's
step as its policy version. Asynchronously the sampler serves the rollout copy of the policy
(async_rollouts.RolloutWeights): each call first takes in trained weights staged since the last
one (never during a call), drops its caches when the version changed, and stamps the version it
sampled with. Requests are served one at a time on a worker thread (the event loop and the
sandboxes keep going).

Log-probabilities are those of the distribution sampled from: log_softmax(logits / temperature),
as TRL scores tokens (top_p is not applied, by neither side); greedy requests give the raw ones, as
rollout/backends/transformers.py does. At temperature 1 both are the same.
"""
from __future__ import annotations

import asyncio
import copy
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from ..rollout.types import Sampled, SamplingParams, common_prefix


class PrefixCachedSampler:
    def __init__(self, model: Any, pad_token_id: Optional[int] = None, max_cached_tokens: int = 65536,
                 version: Optional[int] = None, weights: Any = None):
        """`version`: the fixed policy version of `model`'s weights; `weights`: a RolloutWeights whose
        model and changing version are served instead (async_rollouts.py)."""
        self.model = weights.model if weights is not None else model
        self.version = version
        self.weights = weights
        self.cache_version = version  # the weights the kept caches were computed with
        self.pad_token_id = pad_token_id
        self.max_cached_tokens = max_cached_tokens  # tokens' worth of caches kept (least recently used go first)
        self.caches: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="insandbox-policy")
        self.computed = 0  # context tokens run through the model (not served from a cache), for measuring
        self.reused = 0  # context tokens served from a cache

    async def __call__(self, context: list[int], params: SamplingParams) -> Sampled:
        return await asyncio.get_running_loop().run_in_executor(self.executor, self.generate, context, params)

    def close(self) -> None:
        self.caches.clear()
        self.executor.shutdown(wait=False)

    # ------------------------------------------------------------------ sampling
    def generate(self, context: list[int], params: SamplingParams) -> Sampled:
        if self.weights is None:
            return self._generate(context, params, self.version)
        with self.weights.turn() as version:  # staged weights go in before the call, none during it
            if version != self.cache_version:
                self.caches.clear()
                self.cache_version = version
            return self._generate(context, params, version)

    def _generate(self, context: list[int], params: SamplingParams, version: Optional[int]) -> Sampled:
        import torch
        from transformers import GenerationConfig

        if params.max_tokens <= 0:
            return Sampled([], [], "length", policy_version=version)
        sample = params.temperature > 0
        config = GenerationConfig(
            max_new_tokens=params.max_tokens, do_sample=sample, temperature=params.temperature if sample else None,
            top_p=params.top_p if sample else None, top_k=0 if sample else None, repetition_penalty=1.0, use_cache=True,
            eos_token_id=params.stop_token_ids or None, return_dict_in_generate=True, output_logits=True,
            pad_token_id=self.pad_token_id if self.pad_token_id is not None else (params.stop_token_ids or [0])[0])
        device = next(self.model.parameters()).device
        ids = torch.tensor([context], device=device)
        cache, reused = self._cache_for(context)
        self.reused += reused
        self.computed += len(context) - reused
        with torch.no_grad():
            if params.seed is not None:
                torch.manual_seed(params.seed)
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config,
                                      past_key_values=cache)
        sequence = out.sequences[0].tolist()
        new = sequence[len(context):]
        logits = torch.stack(out.logits, dim=1)[0, :len(new)].float()
        if sample:
            logits = logits / params.temperature
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(new, device=logits.device)[:, None])
        self._keep(sequence, out.past_key_values)
        stopped = bool(new) and new[-1] in params.stop_token_ids
        return Sampled(new, logprobs[:, 0].tolist(), "stop" if stopped else "length", policy_version=version)

    # ------------------------------------------------------------------ the cache
    def _cache_for(self, context: list[int]) -> tuple[Any, int]:
        """A copy of the kept cache sharing the longest prefix with the context, cut to that prefix
        (at least one token is left to compute: generation needs the last position's logits)."""
        best, best_len = None, 0
        for key in self.caches:
            n = common_prefix(key, context)
            if n > best_len:
                best, best_len = key, n
        best_len = min(best_len, len(context) - 1)
        if best is None or best_len <= 0:
            return None, 0
        self.caches.move_to_end(best)
        cache = copy.deepcopy(self.caches[best])
        cache.crop(best_len)
        return cache, best_len

    def _keep(self, sequence: list[int], cache: Any) -> None:
        if cache is None:
            return
        length = cache.get_seq_length()
        key = tuple(sequence[:length])
        longer = next((k for k in self.caches if len(k) >= length and k[:length] == key), None)
        if longer is not None:  # a kept cache already covers this one
            self.caches.move_to_end(longer)
            return
        for old in [k for k in self.caches if len(k) <= length and key[:len(k)] == k]:
            del self.caches[old]  # a prefix of the new one: the new one serves whatever it served
        self.caches[key] = cache
        while sum(len(k) for k in self.caches) > self.max_cached_tokens and len(self.caches) > 1:
            self.caches.popitem(last=False)
