"""Scripted turns as a sampler: each task's turns are replayed as token ids, after a fixed latency.

For tests, and for measuring what the environment costs when the model costs a known amount. The
turn to play is counted from the context: every finished model turn and every environment answer
end with an end-of-turn token, so turn = (end-of-turn tokens in the context - those of the prompt) / 2.
"""
from __future__ import annotations

import asyncio
from typing import Optional

from ..chat import ChatFormat
from ..types import Sampled, SamplingParams

SUBMIT = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'


class ScriptedGenerator:
    def __init__(self, chat: ChatFormat, scripts: list[dict], latency: float = 0.0):
        """scripts: [{"match": text found in the task (optional), "turns": [turn text, ...]}]; past the
        last turn the script submits."""
        self.chat = chat
        self.scripts = scripts
        self.latency = latency
        probe = chat.prompt_ids([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
        self.prompt_stops = sum(1 for t in probe if t in chat.stop_token_ids)
        self.calls = 0

    async def __call__(self, context: list[int], params: SamplingParams) -> Sampled:
        self.calls += 1
        if self.latency:
            await asyncio.sleep(self.latency)
        stops = sum(1 for t in context if t in self.chat.stop_token_ids)
        turn = max(stops - self.prompt_stops, 0) // 2
        turns = self._script(context)
        text = turns[turn] if turn < len(turns) else SUBMIT
        ids = self.chat.encode(text)
        if len(ids) < params.max_tokens:  # room for the end-of-turn token too
            return Sampled(ids + self.chat.stop_token_ids[:1], None, "stop")
        return Sampled(ids[: params.max_tokens], None, "length")  # cut off, as a sampler out of tokens

    def _script(self, context: list[int]) -> list[str]:
        """The script whose `match` appears in the context, else the one without a `match`."""
        text: Optional[str] = None
        for script in self.scripts:
            if script.get("match"):
                text = text if text is not None else self.chat.decode(context)
                if script["match"] in text:
                    return script["turns"]
        return next((s["turns"] for s in self.scripts if not s.get("match")), [])


def load_scripted_policy(scripts: list[dict], latency: float = 0.0, gguf=None, config=None):
    """(tokenizer, generate) as `load_policy` gives them, the sampler scripted: the embedded model's
    tokenizer (or `gguf`'s) and a ScriptedGenerator rendering turns with the rollouts' chat format
    (`config`: a RolloutConfig). A picklable loader for a policy actor: rollouts over Ray in tests
    and benchmarks."""
    from ....models.local_server import default_gguf
    from ..runner import Rollouts
    from . import load_gguf_tokenizer

    tokenizer = load_gguf_tokenizer(gguf or default_gguf())
    return tokenizer, ScriptedGenerator(Rollouts(tokenizer, config).chat, scripts, latency)
