"""A GGUF model through llama.cpp as a rollout sampler: the embedded model, or any GGUF file.

One model serves all rollouts, one request at a time on a worker thread. Rollouts interleave, so
the KV cache of one rollout would be lost to the next: after each turn the sequence's KV cache is
saved under the tokens it holds, and before a turn the saved cache sharing the longest prefix with
the context is loaded, so only the new tokens (the last observation) are evaluated. Only the
sequence's KV cells are copied (llama_state_seq_*: ~20 ms for 1,000 tokens of SmolLM2), not the
whole context state with its logits (Llama.save_state/load_state: ~2 s). Saved caches are kept
least-recently-used within a memory budget.
"""
from __future__ import annotations

import asyncio
import ctypes
import os
import random
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

from ..types import Sampled, SamplingParams, common_prefix


class LlamaCppGenerator:
    def __init__(self, gguf: Path, n_ctx: int = 8192, seed: int = 0, cache_bytes: int = 2 << 30,
                 n_threads: Optional[int] = None):
        from llama_cpp import Llama

        # llama-cpp-python's default is half the cores; generation is the bottleneck of a rollout
        self.llm = Llama(model_path=str(gguf), n_ctx=n_ctx, seed=seed, logits_all=False, verbose=False,
                         n_threads=n_threads or os.cpu_count(), n_threads_batch=n_threads or os.cpu_count())
        self.n_vocab = self.llm.n_vocab()
        self.rng = random.Random(seed)  # a seed per request: rollouts of one group must differ
        self.cache_bytes = cache_bytes
        self.states: OrderedDict[tuple[int, ...], ctypes.Array] = OrderedDict()  # tokens held -> KV cells
        self.cached = 0
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="insandbox-llama")
        self.evaluated = 0  # prompt tokens evaluated (not served from a saved state), for measuring

    async def __call__(self, context: list[int], params: SamplingParams) -> Sampled:
        return await asyncio.get_running_loop().run_in_executor(self.executor, self.generate, context, params)

    def generate(self, context: list[int], params: SamplingParams) -> Sampled:
        import numpy as np

        if len(context) + params.max_tokens > self.llm.n_ctx():
            params.max_tokens = max(self.llm.n_ctx() - len(context), 0)
            if params.max_tokens == 0:
                return Sampled([], [], "length")
        self._restore(context)
        self.llm.set_seed(params.seed if params.seed is not None else self.rng.randrange(2 ** 31))
        self.evaluated += len(context) - self._held_prefix(context)
        stop = set(params.stop_token_ids)
        out: list[int] = []
        logprobs: list[float] = []
        greedy = params.temperature <= 0
        for token in self.llm.generate(context, temp=0.0 if greedy else params.temperature, top_p=params.top_p,
                                       top_k=0 if not greedy else 1, min_p=0.0, repeat_penalty=1.0, reset=True):
            logits = np.ctypeslib.as_array(self.llm._ctx.get_logits_ith(-1), shape=(self.n_vocab,)).astype(np.float64)
            top = logits.max()
            logprobs.append(float(logits[token] - top - np.log(np.exp(logits - top).sum())))
            out.append(token)
            if token in stop or len(out) >= params.max_tokens:
                break
        self._save()
        return Sampled(out, logprobs, "stop" if out and out[-1] in stop else "length")

    # ------------------------------------------------------------------ the prefix cache
    def _held_prefix(self, context: list[int]) -> int:
        return common_prefix(self.llm.input_ids[: self.llm.n_tokens].tolist(), context)

    def _restore(self, context: list[int]) -> None:
        """Load the saved cache that shares the longest prefix with the context (if it beats the live one)."""
        import llama_cpp

        best, best_len = None, self._held_prefix(context)
        for key in self.states:
            if len(key) > best_len and len(key) <= len(context) and tuple(context[: len(key)]) == key:
                best, best_len = key, len(key)
        if best is None:
            return
        data = self.states[best]
        self.llm._ctx.kv_cache_clear()
        if llama_cpp.llama_state_seq_set_data(self.llm._ctx.ctx, data, len(data), 0) != len(data):
            self.llm.reset()  # could not load it: evaluate from scratch
            return
        self.llm.input_ids[: len(best)] = best
        self.llm.n_tokens = len(best)
        self.llm._requires_eval = True  # the logits are not those of the loaded cache
        self.states.move_to_end(best)

    def _save(self) -> None:
        import llama_cpp

        key = tuple(self.llm.input_ids[: self.llm.n_tokens].tolist())
        if not key or key in self.states:
            return
        ctx = self.llm._ctx.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        data = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(ctx, data, size, 0)
        if written != size:
            return
        self.states[key] = data
        self.cached += size
        while self.cached > self.cache_bytes and len(self.states) > 1:
            _, old = self.states.popitem(last=False)
            self.cached -= len(old)
