"""A transformers causal LM as a rollout sampler (the policy itself during TRL training).

Requests from concurrent rollouts are served one at a time on a worker thread; the event loop,
and with it the sandboxes, keep going meanwhile. Log-probabilities are the model's own (raw
logits, before temperature or top-p), as vLLM reports them by default.
"""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from ..types import Sampled, SamplingParams


class TransformersGenerator:
    def __init__(self, model: Any, pad_token_id: Optional[int] = None):
        self.model = model
        self.pad_token_id = pad_token_id
        self.lock = threading.Lock()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="insandbox-generate")

    async def __call__(self, context: list[int], params: SamplingParams) -> Sampled:
        return await asyncio.get_running_loop().run_in_executor(self.executor, self.generate, context, params)

    def generate(self, context: list[int], params: SamplingParams) -> Sampled:
        import torch
        from transformers import GenerationConfig

        sample = params.temperature > 0
        config = GenerationConfig(
            max_new_tokens=params.max_tokens, do_sample=sample, temperature=params.temperature if sample else None,
            top_p=params.top_p if sample else None, top_k=0 if sample else None, repetition_penalty=1.0,
            eos_token_id=params.stop_token_ids or None, return_dict_in_generate=True, output_logits=True,
            pad_token_id=self.pad_token_id if self.pad_token_id is not None else (params.stop_token_ids or [0])[0])
        device = next(self.model.parameters()).device
        ids = torch.tensor([context], device=device)
        with self.lock, torch.no_grad():
            if params.seed is not None:
                torch.manual_seed(params.seed)
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
        new = out.sequences[0, len(context):].tolist()
        logits = torch.stack(out.logits, dim=1)[0, :len(new)].float()
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(new, device=logits.device)[:, None])
        stopped = bool(new) and new[-1] in params.stop_token_ids
        return Sampled(new, logprobs[:, 0].tolist(), "stop" if stopped else "length")
