"""The model seam: messages and tool schemas in, one assistant message out.

Anything that produces assistant turns plugs in here: an HTTP client for an
OpenAI-compatible server, or an RL trainer that generates tokens itself.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Protocol

from ..tools.base import ToolCall


class ModelError(RuntimeError):
    """The model server could not give an answer (after retries): ends the run.
    `latency_s` is how long the request was tried, so the time is never lost."""

    latency_s: float = 0.0


class ContextLengthError(ModelError):
    """The conversation no longer fits the model's context, even with a smaller max_tokens."""


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: Optional[int] = None
    cached_tokens: Optional[int] = None
    cache_write_tokens: Optional[int] = None  # prompt tokens written to a prompt cache, where billed apart
    reported: bool = True  # False: the server sent no usage, the numbers are estimates

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class ModelReply:
    content: Optional[str]
    tool_calls: list[ToolCall]
    message: dict  # the assistant message to append to the conversation
    usage: Usage = field(default_factory=Usage)
    reasoning: Optional[str] = None  # reasoning_content / thinking, when the server returns it
    finish_reason: Optional[str] = None
    latency_s: float = 0.0
    started_at: float = 0.0  # unix time the request was sent (set by the loop)
    tool_calls_from_text: bool = False  # parsed from <tool_call> text: `message` keeps the text as written
    tool_call_errors: list[str] = field(default_factory=list)  # <tool_call> blocks that did not parse
    notes: list[str] = field(default_factory=list)  # what the client had to do (retries, shrinking)
    ttft_s: Optional[float] = None  # streamed: from sending the (successful) request to its first token
    streamed: bool = False
    logprobs: Optional[list[dict]] = None  # per sampled token: {token, logprob[, top]}, when asked for


class ModelClient(Protocol):
    name: str

    async def complete(self, messages: list[dict], tools: Optional[list[dict]] = None) -> ModelReply: ...

    async def close(self) -> None: ...
