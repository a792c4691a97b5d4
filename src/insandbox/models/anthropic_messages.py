"""Client for the Anthropic Messages API (`POST /v1/messages`), through the official `anthropic` SDK.

The loop keeps the conversation in OpenAI's chat shape; each request turns it into
Anthropic's:

- system messages become the top-level `system`; tool results (`role: tool`) become
  `tool_result` blocks at the head of the next user turn, merged with any user text after
  them, and a call of a reply that got no result is answered with an error result, because
  the API refuses a `tool_use` left unanswered;
- an assistant turn is sent back as the blocks the API gave: its thinking blocks first
  (kept on the message as `thinking_blocks`, signatures included, which the API checks when
  thinking is on), then text, then `tool_use`;
- prompt caching: `cache_control` on the system prompt and on the last block of the
  conversation, so each request reads the prefix the one before wrote (2 of the 4
  breakpoints the API allows).

Usage is recorded as input (uncached + cache read + cache write, like OpenAI's
prompt_tokens), cache-read and cache-write tokens. Stop reasons: `tool_use` -> tool_calls,
`end_turn`/`stop_sequence` -> stop, `max_tokens` -> length (a `tool_use` it cut is not run:
the model is told why), `model_context_window_exceeded` -> the run ends `context_length`,
`refusal` -> the run ends `model_error` with the refusal said. A `tool_use` whose input is
not JSON goes to the model as a tool error, streamed or not (asking again would pay for the same
mistake). Retries (429, 529 overloaded, 5xx, `retry-after`, cut streams, error events in a
stream) share models/retrying.py with the OpenAI client; a prompt too long for the context is
`context_length`.
"""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Optional

from ..core import defaults, model_json
from ..tools.base import ToolCall
from .base import ContextLengthError, DeltaHook, ModelError, ModelReply, Usage, refuse_cut_calls
from .endpoint import endpoint_url
from .http_transport import sdk_http_client, sdk_post, sdk_stream_client
from .openai_compat import CONTEXT_ERROR, STALL_TIMEOUT_S
from .retrying import (
    BACKOFF_S,
    MAX_RETRY_AFTER_S,
    Failure,
    MalformedResponse,
    RetryBudget,
    SDKClient,
    StreamBroken,
    StreamStalled,
    broken_stream,
    excerpt,
    pump_stream,
    rejected,
    transport_failure,
)
from .tool_text import parse_text_tool_calls, with_tools_in_prompt

DEFAULT_MAX_TOKENS = 8192  # the API requires one; with thinking, added to the thinking budget
INTERLEAVED_THINKING = "interleaved-thinking-2025-05-14"  # beta: thinking between tool calls
RAW_INPUT = "_input_text"  # on a streamed tool_use block: its input as sent, when that was not JSON
FINISH = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length",
          "pause_turn": "stop"}


class ModelRefused(ModelError):
    """The model declined to answer (stop_reason `refusal`)."""


def api_root(base_url: Optional[str]) -> Optional[str]:
    """The SDK appends /v1/messages itself: accept the same --base-url as for OpenAI (ending /v1)."""
    if base_url is None:
        return None
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def _arguments(text: str) -> dict:
    try:
        value = model_json.loads(text or "{}")
    except ValueError:  # a stream's input that was not JSON, or one nested past reading: sent back as text
        return {"_raw": text}
    return value if isinstance(value, dict) else {"value": value}


def _text_blocks(content: Any) -> list[dict]:
    if isinstance(content, list):
        return [{"type": "text", "text": p.get("text", "")} for p in content
                if isinstance(p, dict) and p.get("type", "text") == "text" and p.get("text")]
    return [{"type": "text", "text": content}] if content else []


def to_messages(messages: list[dict]) -> tuple[list[dict], list[dict]]:
    """OpenAI-shaped history -> (system blocks, Anthropic messages), every tool call answered."""
    system: list[dict] = []
    out: list[dict] = []

    def user_turn() -> list[dict]:
        if not out or out[-1]["role"] != "user":
            out.append({"role": "user", "content": []})
        return out[-1]["content"]

    for m in messages:
        role = m.get("role")
        if role == "system":
            system.extend(_text_blocks(m.get("content")))
        elif role == "tool":
            blocks = user_turn()
            result = {"type": "tool_result", "tool_use_id": m.get("tool_call_id"),
                      "content": m.get("content") or "(no output)"}
            # results go before any text of the same turn, as the API wants
            at = next((i for i, b in enumerate(blocks) if b["type"] != "tool_result"), len(blocks))
            blocks.insert(at, result)
        elif role == "user":
            user_turn().extend(_text_blocks(m.get("content")) or [{"type": "text", "text": "(empty)"}])
        elif role == "assistant":
            blocks = [dict(b) for b in m.get("thinking_blocks") or []]
            blocks += _text_blocks(m.get("content"))
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                blocks.append({"type": "tool_use", "id": c.get("id"), "name": fn.get("name"),
                               "input": _arguments(fn.get("arguments"))})
            if out and out[-1]["role"] == "assistant":
                out[-1]["content"].extend(blocks)
            else:
                out.append({"role": "assistant", "content": blocks or [{"type": "text", "text": "(empty)"}]})
    _answer_every_call(out)
    return system, out


def _answer_every_call(out: list[dict]) -> None:
    """Add an error result for each tool_use the next user turn does not answer."""
    for i, m in enumerate(out):
        if m["role"] != "assistant":
            continue
        ids = [b["id"] for b in m["content"] if b["type"] == "tool_use"]
        if not ids:
            continue
        if i + 1 == len(out) or out[i + 1]["role"] != "user":
            out.insert(i + 1, {"role": "user", "content": []})
        blocks = out[i + 1]["content"]
        answered = {b.get("tool_use_id") for b in blocks if b["type"] == "tool_result"}
        missing = [{"type": "tool_result", "tool_use_id": x, "is_error": True,
                    "content": "not run: the turn ended before this call"} for x in ids if x not in answered]
        out[i + 1]["content"] = missing + blocks


def with_cache_points(system: list[dict], messages: list[dict]) -> None:
    """Mark the stable prefix (system) and the end of the conversation for prompt caching."""
    if system:
        system[-1] = dict(system[-1], cache_control={"type": "ephemeral"})
    for m in reversed(messages):
        if m["content"]:
            last = m["content"][-1]
            if last["type"] not in ("thinking", "redacted_thinking"):  # thinking blocks cannot be marked
                m["content"][-1] = dict(last, cache_control={"type": "ephemeral"})
                return


def to_tools(tools: Optional[list[dict]]) -> Optional[list[dict]]:
    if not tools:
        return None
    out = []
    for t in tools:
        fn = t.get("function", t)
        out.append({"name": fn["name"], "description": fn.get("description", ""),
                    "input_schema": fn.get("parameters") or {"type": "object", "properties": {}}})
    return out


class AnthropicClient(SDKClient):
    def __init__(self, model: str, base_url: Optional[str] = None, api_key: Optional[str] = None,
                 temperature: Optional[float] = None, max_tokens: Optional[int] = None,
                 extra_body: Optional[dict] = None, timeout: float = defaults.REQUEST_TIMEOUT_S,
                 max_retries: int = defaults.MAX_RETRIES, tool_choice: Optional[str] = defaults.TOOL_CHOICE,
                 thinking_budget: Optional[int] = None,
                 prompt_caching: bool = True, stream: bool = False, stall_timeout: float = STALL_TIMEOUT_S,
                 backoff: tuple[float, float] = BACKOFF_S, max_retry_after: float = MAX_RETRY_AFTER_S,
                 tool_format: str = defaults.TOOL_FORMAT):
        self.name = model
        self.base_url = api_root(base_url)
        self.api_key = api_key
        self.params: dict[str, Any] = {"model": model}
        self.extra_body = dict(extra_body or {})
        self.notes_once: list[str] = []
        if thinking_budget:
            self.params["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget}
            if temperature is not None:  # the API takes no temperature with thinking
                self.notes_once.append(f"temperature {temperature} not sent: the API refuses it with thinking on")
                temperature = None
        if temperature is not None:
            self.params["temperature"] = temperature
        self.params["max_tokens"] = max_tokens or DEFAULT_MAX_TOKENS + (thinking_budget or 0)
        self.timeout, self.max_retries = timeout, max_retries
        self.backoff, self.max_retry_after = backoff, max_retry_after
        self.tool_choice = tool_choice
        self.prompt_caching = prompt_caching
        self.stream, self.stall_timeout = stream, stall_timeout
        self.tool_format = tool_format
        self.on_delta: Optional[DeltaHook] = None
        self._client = None

    def _sdk(self):
        if self._client is None:
            import anthropic

            kwargs: dict[str, Any] = {}
            if self.params.get("thinking"):
                kwargs["default_headers"] = {"anthropic-beta": INTERLEAVED_THINKING}
            kwargs["http_client"] = sdk_http_client(anthropic, self.base_url, self.timeout)
            # max_retries=0: retrying is ours (models/retrying.py)
            self._client = anthropic.AsyncAnthropic(base_url=self.base_url, api_key=self.api_key or "EMPTY",
                                                    timeout=self.timeout, max_retries=0, **kwargs)
            if self.stream:
                self._streaming = self._client.with_options(
                    http_client=sdk_stream_client(anthropic, self.base_url, self.timeout))
        return self._client

    def _resource(self) -> Any:
        return self._client.messages

    def request(self, messages: list[dict], tools: Optional[list[dict]]) -> dict:
        """The Messages API request body for this conversation."""
        system, converted = to_messages(messages)
        if self.prompt_caching:
            with_cache_points(system, converted)
        body: dict[str, Any] = dict(self.params, messages=converted)
        if system:
            body["system"] = system
        anthropic_tools = to_tools(tools)
        if anthropic_tools and self.tool_choice != "none":
            body["tools"] = anthropic_tools
            if self.tool_choice is not None:
                body["tool_choice"] = {"type": "any" if self.tool_choice == "required" else "auto"}
        body.update(self.extra_body)
        return body

    async def _complete(self, messages: list[dict], tools: Optional[list[dict]], t0: float) -> ModelReply:
        await self._ready_sdk()
        import anthropic

        budget = RetryBudget(self.max_retries, self.backoff, self.max_retry_after)
        if tools and self.tool_format == "text":
            messages, tools = with_tools_in_prompt(messages, tools), None
        body = self.request(messages, tools)
        while True:
            try:
                tried = time.perf_counter()
                if self.stream:
                    data, first = await self._stream(body)
                    ttft = first - tried
                else:
                    data, ttft = await self._post(body), None
                break
            except anthropic.BadRequestError as e:
                text = _error_text(e)
                if CONTEXT_ERROR.search(text):
                    raise ContextLengthError(f"the conversation no longer fits the model's context: {text}") from e
                raise ModelError(budget.refuse(rejected(text))) from e
            except (anthropic.APIError, MalformedResponse, StreamStalled, StreamBroken, asyncio.TimeoutError) as e:
                await budget.failed(self._failure(e), e)
            except Exception as e:
                failure = broken_stream(e, endpoint_url("anthropic", self.base_url))
                if failure is None:
                    raise
                await budget.failed(failure, e)
        reply = self.reply(data)
        reply.ttft_s, reply.streamed = ttft, self.stream
        reply.latency_s = time.perf_counter() - t0
        reply.notes = self.notes_once + budget.notes + reply.notes
        self.notes_once = []
        return reply

    @staticmethod
    def _sdk_args(body: dict) -> dict:
        """The body as the SDK's arguments: what it requires by name, the rest as JSON it passes on as is
        (so a field the installed SDK has no argument for, such as `temperature` in newer ones, still goes)."""
        required = ("model", "max_tokens", "messages")
        return dict({k: body[k] for k in required}, extra_body={k: v for k, v in body.items() if k not in required})

    async def _post(self, body: dict) -> dict:
        import anthropic

        response = await asyncio.wait_for(sdk_post(self._client, anthropic, "/v1/messages", body), self.timeout)
        return message_json(response.content)

    async def _stream(self, body: dict) -> tuple[dict, float]:
        """One streamed try: the events put together as one message, and when its first token came."""
        import anthropic

        deadline = time.perf_counter() + self.timeout
        stream = await asyncio.wait_for(self._streaming.messages.create(**self._sdk_args(body), stream=True),
                                        self.timeout)
        acc = StreamedMessage()
        await pump_stream(stream, acc.add, self.on_delta, self.stall_timeout, deadline, "events",
                          passthrough=(anthropic.APIError,))
        return acc.message(), acc.first_token_at or time.perf_counter()

    def _failure(self, e: BaseException) -> Failure:
        import anthropic

        url = endpoint_url("anthropic", self.base_url)
        return transport_failure(e, anthropic, url, self.timeout, "a Messages API message",
                                 _error_text,
                                 key_hint="ANTHROPIC_API_KEY or --api-key",
                                 path_hint="and --base-url: the server's root, where /v1/messages is")

    def reply(self, data: dict) -> ModelReply:
        """A Messages API message -> the loop's reply (OpenAI-shaped message, thinking kept)."""
        stop = data.get("stop_reason")
        if stop == "model_context_window_exceeded":
            raise ContextLengthError("the conversation no longer fits the model's context "
                                     "(stop_reason model_context_window_exceeded)")
        texts, thinking, reasoning, calls = [], [], [], []
        for b in data["content"]:
            kind = b.get("type")
            if kind == "text":
                texts.append(b.get("text") or "")
            elif kind in ("thinking", "redacted_thinking"):
                thinking.append(b)
                reasoning.append(b.get("thinking") or "[redacted thinking]")
            elif kind == "tool_use":
                try:
                    calls.append(ToolCall(id=b["id"], name=b["name"], arguments=_input_text(b)))
                except ValueError as e:  # an input nested past reading: the model hears why, nothing runs
                    calls.append(ToolCall(id=b["id"], name=b["name"], arguments="",
                                          refused=f"the arguments are not valid JSON ({e}); send one JSON object"))
        content = "".join(texts)
        from_text, errors = False, []
        if not calls:  # calls written as text (--tool-format text, or a model that does so unasked)
            parsed, rest, errors = parse_text_tool_calls(content)
            if parsed:
                calls, from_text = parsed, True
        if stop == "refusal":
            raise ModelRefused(f"the model refused to go on (stop_reason refusal){': ' + content if content else ''}")
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls and not from_text:  # calls read from text go back as the text they were written in
            message["tool_calls"] = [{"id": c.id, "type": "function",
                                      "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
        if thinking:
            message["thinking_blocks"] = thinking
        reply = ModelReply(content=(rest if from_text else content) or None, tool_calls=calls, message=message,
                           reasoning="\n".join(reasoning) if reasoning else None,
                           finish_reason=FINISH.get(stop, stop), usage=_usage(data.get("usage")),
                           tool_calls_from_text=from_text, tool_call_errors=errors)
        # a whole tool_use ends the turn (stop_reason tool_use): a max_tokens stop with one last was cut inside
        # it, even where what came of its input parses
        last = data["content"][-1] if data["content"] else {}
        refuse_cut_calls(reply, self.params.get("max_tokens"),
                         last_cut=None if from_text else last.get("type") == "tool_use")
        return reply


def message_json(content: bytes) -> dict:
    """The JSON of a Messages API message, checked for the parts we read."""
    if not content.strip():
        raise MalformedResponse("an empty body")
    try:
        data = json.loads(content)
    except (ValueError, RecursionError):  # RecursionError: nested past reading
        raise MalformedResponse(f"a body that is not JSON ({len(content):,} bytes): {excerpt(content)}") from None
    if not isinstance(data, dict):
        raise MalformedResponse(f"JSON that is not an object: {excerpt(content)}")
    if data.get("type") == "error":
        raise MalformedResponse(f"an error instead of a message: {excerpt(json.dumps(data.get('error')))}")
    blocks = data.get("content")
    if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
        raise MalformedResponse(f"no list of content blocks: {excerpt(content)}")
    for i, b in enumerate(blocks):
        if b.get("type") == "tool_use" and not (isinstance(b.get("id"), str) and isinstance(b.get("name"), str)):
            raise MalformedResponse(f"tool_use block {i} has no id or name: {excerpt(content)}")
    return data


def _input_text(block: dict) -> str:
    """A tool_use block's input as the call's arguments: the JSON of the object, or the text that
    came when it is not one (a stream's input that did not parse, a server's string), so that the
    tool layer tells the model its arguments were not a JSON object."""
    if RAW_INPUT in block:
        return block[RAW_INPUT]
    value = block.get("input")
    if isinstance(value, str):
        return value
    return model_json.dumps(value if value is not None else {})  # ValueError: nested past reading


def _usage(u: Any) -> Usage:
    if not isinstance(u, dict) or not isinstance(u.get("input_tokens"), int):
        return Usage(reported=False)
    read = u.get("cache_read_input_tokens") or 0
    written = u.get("cache_creation_input_tokens") or 0
    return Usage(prompt_tokens=u["input_tokens"] + read + written, completion_tokens=u.get("output_tokens") or 0,
                 cached_tokens=read, cache_write_tokens=written)


def _error_text(e: Exception) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:600]
    return str(getattr(e, "message", None) or e)[:600]


class StreamedMessage:
    """Messages API stream events put together into the message they make up."""

    def __init__(self):
        self.events = 0
        self.first_token_at: Optional[float] = None
        self.data: Optional[dict] = None
        self.blocks: dict[int, dict] = {}
        self.json_parts: dict[int, list[str]] = {}
        self.stopped = False

    def add(self, event: dict) -> list[tuple[str, str]]:
        """Take one event; returns the (kind, text) pieces of the answer it brought (a tool call's or a
        signature's with empty text); none for events without any (ping, message_start, a block's end)."""
        self.events += 1
        kind = event.get("type")
        pieces: list[tuple[str, str]] = []
        if kind == "error":
            raise MalformedResponse(f"an error event: {excerpt(json.dumps(event.get('error')))}")
        if kind == "message_start":
            self.data = dict(event["message"])
        elif kind == "content_block_start":
            self.blocks[event["index"]] = dict(event["content_block"])
            if event["content_block"].get("type") == "tool_use":
                self.json_parts[event["index"]] = []
                pieces.append(("tool_call", ""))  # its name and id: part of the answer
        elif kind == "content_block_delta":
            block, delta = self.blocks[event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] = block.get("text", "") + delta["text"]
                if delta["text"]:
                    pieces.append(("content", delta["text"]))
            elif delta["type"] == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta["thinking"]
                if delta["thinking"]:
                    pieces.append(("reasoning", delta["thinking"]))
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
                if delta["signature"]:
                    pieces.append(("signature", ""))
            elif delta["type"] == "input_json_delta":
                self.json_parts[event["index"]].append(delta["partial_json"])
                if delta["partial_json"]:
                    pieces.append(("tool_call", ""))
        elif kind == "content_block_stop":
            self.finish_input(event["index"])
        elif kind == "message_delta" and self.data is not None:
            self.data.update(event.get("delta") or {})
            usage = dict(self.data.get("usage") or {})
            usage.update(event.get("usage") or {})
            self.data["usage"] = usage
        elif kind == "message_stop":
            self.stopped = True
        if pieces and self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        return pieces

    def finish_input(self, index: int) -> None:
        """Put a tool_use block's input together. Input that is not JSON (a model's mistake, or a cut
        at max_tokens) is the model's to hear about as the call's error, not a failed request: it
        is kept as text, and the same request would only be paid for again."""
        parts = self.json_parts.pop(index, None)
        if parts is None:
            return
        text = "".join(parts)
        try:
            self.blocks[index]["input"] = model_json.loads(text or "{}")
        except ValueError:  # not JSON, nested past reading, NaN, a key twice: the tool layer says which
            self.blocks[index].update(input={}, **{RAW_INPUT: text})

    def message(self) -> dict:
        if self.data is None or not self.stopped:
            raise MalformedResponse(f"a stream cut short: {self.events} events and no message_stop")
        for index in list(self.json_parts):  # a block the stream never closed (a cut at max_tokens)
            self.finish_input(index)
        return dict(self.data, content=[self.blocks[i] for i in sorted(self.blocks)])
