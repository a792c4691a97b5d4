"""The model seam: messages and tool schemas in, one assistant message out.

Anything that produces assistant turns plugs in here: an HTTP client for an
OpenAI-compatible server, or an RL trainer that generates tokens itself.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Protocol

from ..core import model_json
from ..core.episode import ExitReason
from ..core.errors import ContextLengthError, ModelError  # noqa: F401 (the model's failures)
from ..tools.base import ToolCall


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
    # the episode ends with this reply, its tool calls not run (a token-level client whose reply ran into
    # the response budget): (reason, detail); the step is recorded, with the reply's notes saying why
    ends_episode: Optional[tuple[ExitReason, str]] = None


class ContextFull(ContextLengthError):
    """Raised by a client instead of sending a request: the conversation no longer fits (a token-level
    client whose next turn would start past its budget). The episode ends as context_length with the
    message as its detail; no request was made, so none is recorded as failed."""


def refuse_cut_calls(reply: ModelReply, max_tokens: Optional[int], last_cut: Optional[bool] = None) -> None:
    """A reply stopped by max_tokens (finish_reason "length") inside its last tool call: that call's
    arguments are incomplete. It is not run and the model reads why, as the call's error (or, for
    a call written as text that could not be read, in the nudge); the step gets one note saying
    so, for the console. Calls complete before the cut run as usual. `max_tokens`: what the
    request asked for, if it did; `last_cut`: whether the API says the last call was cut (None:
    judged by whether its arguments are a whole JSON object)."""
    if reply.finish_reason != "length":
        return
    limit = f"max_tokens ({max_tokens:,} tokens)" if max_tokens else "the server's max_tokens"
    said = f"your reply was cut at {limit} before the call's arguments were complete"
    cut_call, cut_error = None, False
    text = reply.message.get("content")
    if reply.tool_calls_from_text or (reply.tool_call_errors and not reply.tool_calls):
        from .tool_text import last_call_cut

        cut = last_call_cut(text if isinstance(text, str) else "")
        if cut == "call" and reply.tool_calls:
            cut_call = reply.tool_calls[-1]
        cut_error = cut == "error" and bool(reply.tool_call_errors)
    elif reply.tool_calls:
        if last_cut is None:
            last_cut = not _complete_object(reply.tool_calls[-1].arguments)
        cut_call = reply.tool_calls[-1] if last_cut else None
    if cut_call is not None:
        cut_call.refused = (f"{said}, so it was not run; make the call again with shorter arguments "
                            "(a long file can be written in several steps)")
    elif cut_error:
        reply.tool_call_errors[-1] = f"{said} ({reply.tool_call_errors[-1]})"
    else:
        return
    name = cut_call.name if cut_call is not None else "a tool, written as text"
    reply.notes.append(f"hint: the reply was cut at {limit} inside a call to {name}: not run, and the model was "
                       "told why; raise --max-tokens if this happens often")


def _complete_object(arguments: str) -> bool:
    try:
        return isinstance(model_json.loads(arguments or "{}"), dict)
    except ValueError:
        return False


DeltaHook = Callable[[str, str], None]  # a piece of a streamed reply: (kind: "content" | "reasoning", text)


class ModelClient(Protocol):
    name: str

    async def complete(self, messages: list[dict], tools: Optional[list[dict]] = None) -> ModelReply: ...

    async def close(self) -> None: ...


class LocalServer(Protocol):
    """A model server process that a client started and stops with itself (the embedded model's)."""

    gguf: Optional[Path]  # the model file it serves (None: the default one)

    def info(self) -> dict: ...  # where it ran and when it was ready, for the trajectory


class ConfiguredClient(ModelClient, Protocol):
    """A client insandbox makes from the settings (runs/session.py, make_model_client). Besides a
    ModelClient's members it declares what its user may wire, so nothing is found by probing:
    `on_delta` receives each piece of a streamed reply as it comes (None: nobody shows them);
    `server` is the local model server it started (None: a remote endpoint)."""

    on_delta: Optional[DeltaHook]
    server: Optional[LocalServer]
