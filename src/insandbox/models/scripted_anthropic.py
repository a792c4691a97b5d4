"""The scripted server's Anthropic Messages API (`POST /v1/messages`): the same script turns,
rendered as content blocks, and the request checked the way the real API checks it.

What the real API refuses, this refuses too (400 `invalid_request_error`), so a client that
gets the protocol wrong fails here and not only in production:

- no `max_tokens`; a `system` role inside `messages`; roles other than user and assistant;
- a `tool_use` whose `tool_result` is not in the very next user message, or a `tool_result`
  for no such call;
- with `thinking` on: an assistant turn with tool calls that does not start with the thinking
  block this server sent (its `signature` is checked);
- more than 4 `cache_control` breakpoints.

Prompt caching is simulated: every prefix ending at a breakpoint is cached, and a request reads
the longest cached prefix ending within 20 blocks before one of its breakpoints, as the API
does. Usage reports `input_tokens` (uncached), `cache_read_input_tokens`,
`cache_creation_input_tokens` and `output_tokens` (about 4 characters a token).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Iterator
from typing import Any, Optional

from ..core.errors import InternalSignal

SIGNING_KEY = b"insandbox-scripted"
LOOKBACK_BLOCKS = 20  # how far before a breakpoint the API looks for a cached prefix
MAX_BREAKPOINTS = 4


class InvalidRequest(InternalSignal, ValueError):
    """What the real API would answer 400 invalid_request_error to."""


def signature(thinking: str) -> str:
    return hmac.new(SIGNING_KEY, thinking.encode(), hashlib.sha256).hexdigest()


def tokens(obj: Any) -> int:
    return max(1, len(json.dumps(obj, ensure_ascii=False)) // 4)


def _blocks(content: Any) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def first_user_text(req: dict) -> str:
    for m in req.get("messages") or []:
        if m.get("role") == "user":
            return "".join(b.get("text", "") for b in _blocks(m.get("content")) if b.get("type") == "text")
    return ""


def validate(req: dict) -> None:
    """Raise InvalidRequest where the real Messages API would refuse the request."""
    if not isinstance(req.get("max_tokens"), int):
        raise InvalidRequest("max_tokens: Field required")
    messages = req.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: at least one message is required")
    thinking = (req.get("thinking") or {}).get("type") == "enabled"
    pending: list[str] = []  # tool_use ids the next user message must answer
    breakpoints = sum(1 for b in _blocks(req.get("system")) if b.get("cache_control"))
    breakpoints += sum(1 for t in req.get("tools") or [] if t.get("cache_control"))
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in ("user", "assistant"):
            raise InvalidRequest(f"messages.{i}.role: Input should be 'user' or 'assistant' (system text goes in "
                                 "the top-level `system` parameter)")
        blocks = _blocks(m.get("content"))
        breakpoints += sum(1 for b in blocks if b.get("cache_control"))
        if role == "user":
            answered = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
            unknown = [x for x in answered if x not in pending]
            if unknown:
                raise InvalidRequest(f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                                     f"{', '.join(map(str, unknown))}. Each `tool_result` block must have a "
                                     "corresponding `tool_use` block in the previous message.")
            missing = [x for x in pending if x not in answered]
            if missing:
                raise InvalidRequest(f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                                     f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                                     "corresponding `tool_result` block in the next message.")
            pending = []
            continue
        if pending:
            raise InvalidRequest(f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
                                 f"after: {', '.join(pending)}")
        pending = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        if thinking and pending:
            head = blocks[0]
            if head.get("type") not in ("thinking", "redacted_thinking"):
                raise InvalidRequest(f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
                                     f"found `{head.get('type')}`. When `thinking` is enabled, a final `assistant` "
                                     "message must start with a thinking block.")
            for j, b in enumerate(blocks):
                if b.get("type") == "thinking" and b.get("signature") != signature(b.get("thinking", "")):
                    raise InvalidRequest(f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block")
    if pending:
        raise InvalidRequest(f"`tool_use` ids were found without `tool_result` blocks immediately after: "
                             f"{', '.join(pending)}")
    if breakpoints > MAX_BREAKPOINTS:
        raise InvalidRequest(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                             f"Found {breakpoints}.")


def _prefix(req: dict) -> Iterator[tuple[dict, bool]]:
    """The prompt's blocks in the order the cache sees them (tools, system, messages), with
    whether each is a breakpoint."""
    for t in req.get("tools") or []:
        yield t, bool(t.get("cache_control"))
    for b in _blocks(req.get("system")):
        yield b, bool(b.get("cache_control"))
    for m in req.get("messages") or []:
        for b in _blocks(m.get("content")):
            yield dict(b, _role=m.get("role")), bool(b.get("cache_control"))


def cached_usage(req: dict, cache: dict[str, int], min_tokens: int = 0) -> dict:
    """Prompt tokens split into uncached, read from the cache and written to it; updates `cache`."""
    hashes, counts, marks = [], [], []
    h, total = hashlib.sha256(), 0
    for block, mark in _prefix(req):
        clean = {k: v for k, v in block.items() if k != "cache_control"}
        h.update(json.dumps(clean, sort_keys=True, ensure_ascii=False).encode())
        total += tokens(clean)
        hashes.append(h.hexdigest())
        counts.append(total)
        if mark:
            marks.append(len(hashes) - 1)
    read = 0
    for m in marks:
        for pos in range(m, max(-1, m - LOOKBACK_BLOCKS), -1):
            if hashes[pos] in cache:
                read = max(read, counts[pos])
                break
    written = 0
    if marks and counts[marks[-1]] >= min_tokens:
        for m in marks:
            cache[hashes[m]] = counts[m]
        written = max(0, counts[marks[-1]] - read)
    return {"input_tokens": max(0, total - read - written), "cache_read_input_tokens": read,
            "cache_creation_input_tokens": written}


def message(req: dict, turn: dict, calls: list[dict], model: str, usage: Optional[dict]) -> dict:
    """The turn as an Anthropic message. `calls` are the turn's calls in OpenAI shape."""
    content: list[dict] = []
    thinking_on = (req.get("thinking") or {}).get("type") == "enabled"
    if thinking_on and turn.get("reasoning_content"):
        text = turn["reasoning_content"]
        content.append({"type": "thinking", "thinking": text, "signature": signature(text)})
    text = turn.get("content") or ""
    if calls and turn.get("as_text"):  # the calls written into the text, as a model without tool support does
        text += "".join("\n<tool_call>\n" + json.dumps({"name": c["function"]["name"],
                                                        "arguments": json.loads(c["function"]["arguments"])})
                        + "\n</tool_call>" for c in calls)
        calls = []
    if text:
        content.append({"type": "text", "text": text})
    for c in calls:
        try:
            args = json.loads(c["function"]["arguments"])
        except (ValueError, RecursionError):  # the API always sends an object; a malformed script's text: kept
            args = {"_raw": c["function"]["arguments"]}
        content.append({"type": "tool_use", "id": "toolu_" + c["id"].removeprefix("call_"),
                        "name": c["function"]["name"], "input": args})
    stop = turn.get("stop_reason") or ("tool_use" if calls else "end_turn")
    body = {"id": "msg_" + uuid.uuid4().hex[:20], "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": None}
    if usage is not None:
        body["usage"] = dict(usage, output_tokens=tokens(content))
        body["usage"].update(turn.get("usage") or {})
    return body


def _pieces(text: str, size: int = 8) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def stream_events(body: dict) -> Iterator[tuple[str, dict]]:
    """The message as the API streams it: (event name, data) pairs."""
    usage = dict(body.get("usage") or {})
    start = dict(body, content=[], stop_reason=None, usage=dict(usage, output_tokens=1))
    yield "message_start", {"type": "message_start", "message": start}
    for i, block in enumerate(body["content"]):
        kind = block["type"]
        empty = {"thinking": {"type": "thinking", "thinking": "", "signature": ""},
                 "text": {"type": "text", "text": ""},
                 "tool_use": dict(block, input={})}[kind]
        yield "content_block_start", {"type": "content_block_start", "index": i, "content_block": empty}
        if kind == "thinking":
            for p in _pieces(block["thinking"]):
                yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "thinking_delta", "thinking": p}}
            yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                          "delta": {"type": "signature_delta", "signature": block["signature"]}}
        elif kind == "text":
            for p in _pieces(block["text"]):
                yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "text_delta", "text": p}}
        else:
            for p in _pieces(json.dumps(block["input"], ensure_ascii=False), 16):
                yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "input_json_delta", "partial_json": p}}
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": body["stop_reason"], "stop_sequence": None},
                            "usage": {"output_tokens": usage.get("output_tokens", 1)}}
    yield "message_stop", {"type": "message_stop"}


def error_body(status: int, text: str) -> dict:
    kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
            429: "rate_limit_error", 529: "overloaded_error"}.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": text}}
