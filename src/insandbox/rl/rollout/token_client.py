"""The policy as a model client: the agent loop asks it for turns, it samples token ids and keeps them.

A rollout runs through agent.loop like any run; this client is its model. It holds the rollout's
token record, built turn by turn and never re-rendered (chat.py):

    first request:   prompt_ids = template(system, task) + assistant header
    every request:   the messages added since the last one (the loop appended this client's own
                     assistant message, then the environment's answer) -> observation ids, mask 0
                     (the answer's special-token text escaped in the conversation first: chat.py)
                     sampled = generate(prompt_ids + response_ids)   -> response ids, mask 1, logprobs
                     the reply: the sampled text, its tool calls parsed from it

The response has a token budget (max_response_tokens, observations included). A turn cut by it
ends the episode with that reply (`ModelReply.ends_episode`: context_length, its calls not run);
an observation that would reach it ends the episode before the next request (ContextFull). Both
set `truncated`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

from ...core.episode import ExitReason
from ...models.base import ContextFull, ModelReply, Usage
from ...models.tool_text import parse_text_tool_calls
from .chat import ChatFormat
from .types import GenerateFn, SamplingParams


@dataclass
class TokenRecord:
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)  # 1: sampled by the policy, 0: the environment's
    logprobs: list[Optional[float]] = field(default_factory=list)  # aligned with response_ids; None at env tokens
    have_logprobs: bool = False  # the sampler gave logprobs (else response_logprobs is None)
    policy_versions: list[Optional[int]] = field(default_factory=list)  # per model turn, as the sampler said
    truncated: bool = False  # the response ran out of its budget

    @property
    def response_logprobs(self) -> Optional[list[Optional[float]]]:
        return self.logprobs if self.have_logprobs else None

    @property
    def policy_version(self) -> Optional[int]:
        """The oldest version that sampled a turn; None when any turn's is unknown (or none was sampled)."""
        if not self.policy_versions or any(v is None for v in self.policy_versions):
            return None
        return min(v for v in self.policy_versions if v is not None)


class TokenClient:
    """A ModelClient over a token sampler (`generate`), for one rollout."""

    name = "policy"

    def __init__(self, chat: ChatFormat, generate: GenerateFn, *, max_response_tokens: int,
                 max_tokens_per_turn: int, temperature: float = 1.0, top_p: float = 1.0):
        self.chat = chat
        self.generate = generate
        self.max_response_tokens = max_response_tokens
        self.max_tokens_per_turn = max_tokens_per_turn
        self.temperature = temperature
        self.top_p = top_p
        self.record = TokenRecord()
        self.turns = 0  # turns sampled
        self.tool_calls = 0  # calls of the turns handed to the loop to run
        self.generate_s = 0.0  # time in `generate`
        self._seen = 0  # messages already in the record
        self._last: Optional[dict] = None  # the assistant message of the last turn
        self._stopped = False  # the last turn ended on its end-of-turn token

    async def complete(self, messages: list[dict], tools: Optional[list[dict]] = None) -> ModelReply:
        chat, rec, budget = self.chat, self.record, self.max_response_tokens
        if self._last is None:
            rec.prompt_ids = chat.prompt_ids(messages)
        else:
            added = messages[self._seen:]
            if not added or added[0] is not self._last:
                raise RuntimeError("the conversation changed between two turns of a token-level rollout: "
                                   "its ids can only grow")
            observation = chat.observation_ids(added[1:], self._stopped)
            if len(rec.response_ids) + len(observation) >= budget:
                rec.truncated = True
                raise ContextFull(f"the response reached its budget of {budget} tokens")
            rec.response_ids += observation
            rec.response_mask += [0] * len(observation)
            rec.logprobs += [None] * len(observation)
        self._seen = len(messages)

        left = budget - len(rec.response_ids)
        params = SamplingParams(max_tokens=min(self.max_tokens_per_turn, left), temperature=self.temperature,
                                top_p=self.top_p, stop_token_ids=list(chat.stop_token_ids))
        context = rec.prompt_ids + rec.response_ids
        started, t0 = time.time(), time.perf_counter()
        sampled = await self.generate(context, params)
        latency = time.perf_counter() - t0
        self.generate_s += latency
        ids = list(sampled.token_ids)[:left]
        rec.response_ids += ids
        rec.response_mask += [1] * len(ids)
        rec.logprobs += list(sampled.logprobs)[:len(ids)] if sampled.logprobs is not None else [None] * len(ids)
        rec.have_logprobs = rec.have_logprobs or sampled.logprobs is not None
        rec.policy_versions.append(sampled.policy_version)
        self.turns += 1

        stopped = bool(ids) and ids[-1] in chat.stop_token_ids
        assistant = {"role": "assistant", "content": chat.assistant_text(ids)}
        calls, rest, errors = parse_text_tool_calls(assistant["content"])
        reply = ModelReply(content=rest, tool_calls=calls, message=assistant,
                           usage=Usage(prompt_tokens=len(context), completion_tokens=len(ids)),
                           finish_reason="stop" if stopped else "length", latency_s=latency,
                           started_at=started, tool_calls_from_text=True, tool_call_errors=errors)
        if not stopped and len(rec.response_ids) >= budget:
            # the budget cut this turn: the rollout ends here, before the step could end it another way
            # (a last turn would otherwise read as max_steps, untruncated); its calls are not run
            rec.truncated = True
            reply.ends_episode = (ExitReason.CONTEXT_LENGTH,
                                  f"the response reached its budget of {budget} tokens mid-turn")
            reply.notes.append(f"cut at the response budget: {len(calls)} tool call(s) not run")
        else:
            self.tool_calls += len(calls)
        self._last, self._stopped = assistant, stopped
        return reply

    async def close(self) -> None:
        pass
