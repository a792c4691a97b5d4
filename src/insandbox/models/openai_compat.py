"""Client for any OpenAI-compatible chat-completions server (vLLM, SGLang, llama.cpp,
Ollama, OpenAI), through the official `openai` SDK.

The SDK sends the requests; retrying is ours (models/retrying.py: one budget for every kind
of failure, `Retry-After` honoured). `timeout` bounds each try as a whole, also a server that
trickles its answer byte by byte (the HTTP library's own timeouts only bound the gaps between
bytes). We also shrink max_tokens when the context overflows, switch to
max_completion_tokens or drop temperature for models that refuse them, and read tool calls
written as text. Replies are read from the raw JSON, checked for the shape of a chat completion.

Streaming (`stream=True`): the answer comes as server-sent events; `on_delta` sees each
piece of text or reasoning as it arrives, the reply records the time to its first token,
and a stream that sends nothing for `stall_timeout` seconds is a failed (retried) try.

With `tool_format="text"` no structured tools are sent: their schemas and the calling
convention go into the system prompt, and calls are read from the reply's text, so a model or
server without tool support still works.

Tools always travel with `tool_choice` ("auto" unless configured): some servers
(llama-cpp-python's) read a request with tools but no tool_choice as "no tools".

`logprobs` always travel with `top_logprobs` (1 unless more are asked for): llama-cpp-python's
server sends none without it, llama-server none with 0. A server that refuses them for a request
(llama-server with tools and streaming) or sends none gets said once, in the step's notes.
A reply cut at max_tokens (`finish_reason: length`) inside its last tool call does not run that
call: the model is told why (models/base.py `refuse_cut_calls`).
"""
from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any, Optional

from ..core import defaults, model_json
from ..tools.base import ToolCall
from .base import ContextLengthError, DeltaHook, ModelError, ModelReply, Usage, refuse_cut_calls
from .endpoint import endpoint_url
from .http_transport import sdk_http_client, sdk_post, sdk_stream_client
from .retrying import (
    BACKOFF_S,
    EXCERPT_CHARS,
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
    retry_after_s,  # noqa: F401  (re-exported: tests and callers read it here)
    short,
    transport_failure,
)
from .tool_text import new_call_id, parse_text_tool_calls, with_tools_in_prompt

CONTEXT_ERROR = re.compile(
    r"context length|context window|maximum context|context_length_exceeded|too many tokens|"
    r"exceeds? the (?:available )?context|prompt is too long|input is too long|reduce the length|"
    r"tokens exceed|exceed_context_size", re.I)
LOGPROBS_REFUSED = re.compile(r"logprobs?\b.{0,60}\b(?:not supported|unsupported|not available)|"
                             r"(?:not supported|unsupported)\b.{0,40}\blogprobs", re.I | re.S)
MIN_MAX_TOKENS = 16
MAX_SHRINKS = 4
STALL_TIMEOUT_S = defaults.STALL_TIMEOUT_S  # a stream silent this long has stalled






def shrink_max_tokens(message: str, current: Optional[int]) -> Optional[int]:
    """A max_tokens that may fit, from the server's error text; None when nothing fits."""
    limit = re.search(r"(?:maximum context length|context (?:length|window|size)) (?:is|of) (\d+)", message, re.I)
    prompt = re.search(r"(\d+) (?:tokens )?in the messages|(\d+) input tokens|prompt (?:contains|has|is) (\d+)|"
                       r"request(?:ed)? (\d+) tokens? (?:for|in) the (?:prompt|input)", message, re.I)
    if limit and prompt:
        used = int(next(g for g in prompt.groups() if g))
        room = int(limit.group(1)) - used - 8
        if current is not None:
            room = min(room, current - 1)
        return room if room >= MIN_MAX_TOKENS else None
    if current is not None and current // 2 >= MIN_MAX_TOKENS:
        return current // 2
    return None


class OpenAIChatClient(SDKClient):
    def __init__(self, model: str, base_url: Optional[str] = None, api_key: Optional[str] = None,
                 temperature: Optional[float] = None, max_tokens: Optional[int] = None,
                 extra_body: Optional[dict] = None, timeout: float = defaults.REQUEST_TIMEOUT_S,
                 max_retries: int = defaults.MAX_RETRIES, send_reasoning: bool = False,
                 extra_params: Optional[dict] = None,
                 tool_choice: Optional[str] = defaults.TOOL_CHOICE, backoff: tuple[float, float] = BACKOFF_S,
                 max_retry_after: float = MAX_RETRY_AFTER_S, stream: bool = False,
                 stall_timeout: float = STALL_TIMEOUT_S, logprobs: bool = False, top_logprobs: int = 0,
                 tool_format: str = defaults.TOOL_FORMAT):
        self.name = model
        self.base_url = base_url
        self.api_key = api_key
        self.params: dict[str, Any] = {"model": model}
        if temperature is not None:
            self.params["temperature"] = temperature
        if max_tokens is not None:
            self.params["max_tokens"] = max_tokens
        self.extra_body = extra_body
        if extra_body:
            self.params["extra_body"] = extra_body
        if logprobs:
            # top_logprobs always goes along: llama-cpp-python's server sends no logprobs without it,
            # and llama-server none with 0. The alternatives are recorded only when asked for.
            self.params["logprobs"] = True
            self.params["top_logprobs"] = top_logprobs or 1
        self.record_top = bool(top_logprobs)
        self.said_no_logprobs = False  # the reason none came is said once, not every step
        self.params.update(extra_params or {})
        self.timeout, self.max_retries = timeout, max_retries
        self.backoff, self.max_retry_after = backoff, max_retry_after
        self.send_reasoning = send_reasoning
        self.tool_choice = tool_choice  # None: never send one
        self.stream, self.stall_timeout = stream, stall_timeout
        self.tool_format = tool_format  # "text": tools described in the system prompt, calls read from the text
        self.on_delta: Optional[DeltaHook] = None  # set by whoever shows the tokens as they come
        self._client = None

    def _sdk(self):
        if self._client is None:
            import openai

            # max_retries=0: retrying is ours (see models/retrying.py)
            self._client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key or "EMPTY",
                                              timeout=self.timeout, max_retries=0,
                                              http_client=sdk_http_client(openai, self.base_url, self.timeout))
            if self.stream:
                self._streaming = self._client.with_options(
                    http_client=sdk_stream_client(openai, self.base_url, self.timeout))
        return self._client

    def _resource(self) -> Any:
        return self._client.chat.completions

    async def _complete(self, messages: list[dict], tools: Optional[list[dict]], t0: float) -> ModelReply:
        client = await self._ready_sdk()
        import openai

        if tools and self.tool_format == "text":
            messages, tools = with_tools_in_prompt(messages, tools), None
        budget = RetryBudget(self.max_retries, self.backoff, self.max_retry_after)
        notes = budget.notes
        shrinks = 0
        call_params: dict[str, Any] = {}  # this call's own max_tokens after a context overflow
        while True:
            # The conversation and tool schemas travel in `extra_body`, which the SDK merges
            # into the JSON as is: its per-request deep transform of typed params costs ~0.25 ms
            # per message (~50 ms a call at 100 steps) and does nothing for plain JSON dicts.
            kwargs = {**self.params, **call_params}
            body = dict(kwargs.pop("extra_body", None) or {}, messages=messages)
            if tools:
                body["tools"] = tools
                if self.tool_choice is not None:
                    body.setdefault("tool_choice", self.tool_choice)
            try:
                tried = time.perf_counter()
                if self.stream:
                    data, ttft = await self._stream(client, kwargs, body)
                    ttft -= tried
                else:
                    data, ttft = await self._post(client, kwargs, body), None
                reply = self._reply(data, messages)
                reply.ttft_s, reply.streamed = ttft, self.stream
                refuse_cut_calls(reply, kwargs.get("max_tokens") or kwargs.get("max_completion_tokens"))
                break
            except openai.BadRequestError as e:
                text = _error_text(e)
                if self._adapt(text, notes):
                    continue
                if CONTEXT_ERROR.search(text):
                    key = "max_completion_tokens" if "max_completion_tokens" in self.params else "max_tokens"
                    current = call_params.get(key, self.params.get(key))
                    smaller = shrink_max_tokens(text, current) if shrinks < MAX_SHRINKS else None
                    if smaller is None:
                        raise ContextLengthError(f"the conversation no longer fits the model's context: {text}") from e
                    notes.append(f"context overflow: {key} {current} -> {smaller}")
                    call_params[key] = smaller
                    shrinks += 1
                    continue
                raise ModelError(budget.refuse(rejected(text))) from e
            except (openai.APIError, MalformedResponse, StreamStalled, StreamBroken, asyncio.TimeoutError) as e:
                await budget.failed(self._failure(e), e)
            except Exception as e:
                failure = broken_stream(e, endpoint_url("openai", self.base_url))
                if failure is None:
                    raise
                await budget.failed(failure, e)
        reply.latency_s = time.perf_counter() - t0
        reply.notes = notes + reply.notes
        if self.params.get("logprobs") and reply.logprobs is None and not self.said_no_logprobs \
                and (reply.content or reply.tool_calls):
            self.said_no_logprobs = True
            which = (" (some servers send none for tool calls: llama-cpp-python's chatml-function-calling format)"
                     if reply.tool_calls else "")
            reply.notes.append(f"hint: --logprobs: the model server sent no log probabilities for this reply{which}; "
                               "steps without them record none (said once)")
        return reply

    async def _post(self, client: Any, kwargs: dict, body: dict) -> dict:
        """One try: the completion's JSON, checked for shape. `timeout` bounds the whole try."""
        import openai

        # the body's own fields win over the parameters, as the SDK merges its extra_body
        response = await asyncio.wait_for(sdk_post(client, openai, "/chat/completions", {**kwargs, **body}),
                                          self.timeout)
        return completion_json(response.content, response.headers.get("content-type"))

    async def _stream(self, client: Any, kwargs: dict, body: dict) -> tuple[dict, float]:
        """One streamed try: the chunks put together as one completion's JSON, and the moment
        (perf_counter) its first token came. `timeout` bounds the whole try, `stall_timeout` each gap."""
        import openai

        body = dict(body)
        body.setdefault("stream_options", {"include_usage": True})
        deadline = time.perf_counter() + self.timeout
        stream = await asyncio.wait_for(
            self._streaming.chat.completions.create(**kwargs, messages=[], extra_body=body, stream=True),
            self.timeout)
        acc = StreamedCompletion()
        await pump_stream(stream, acc.add, self.on_delta, self.stall_timeout, deadline, "chunks",
                          passthrough=(openai.APIError,))
        return acc.completion(), acc.first_token_at or time.perf_counter()

    def _failure(self, e: BaseException) -> Failure:
        import openai

        url = endpoint_url("openai", self.base_url)
        return transport_failure(e, openai, url, self.timeout, "a chat completion", _error_text)

    def _adapt(self, text: str, notes: list[str]) -> bool:
        """Fix parameters some models or servers refuse (OpenAI reasoning models, llama-server's
        logprobs with tools and streaming); True to retry."""
        if "logprobs" in self.params and LOGPROBS_REFUSED.search(text):
            self.params.pop("logprobs")
            self.params.pop("top_logprobs", None)
            self.said_no_logprobs = True
            how = " (leave out --stream, or use --tool-format text, to record them)" if re.search(
                r"stream", text, re.I) else ""
            notes.append(f"hint: --logprobs: the model server refuses log probabilities here ({short(text, 120)}), "
                         f"so this run records none{how}")
            return True
        if "max_completion_tokens" in text and "max_tokens" in self.params:
            self.params["max_completion_tokens"] = self.params.pop("max_tokens")
            notes.append("server wants max_completion_tokens instead of max_tokens")
            return True
        if re.search(r"temperature", text, re.I) and re.search(r"unsupported|not supported|does not support",
                                                                 text, re.I) and "temperature" in self.params:
            self.params.pop("temperature")
            notes.append("server does not accept temperature; dropped it")
            return True
        return False

    def _reply(self, data: dict, messages: list[dict]) -> ModelReply:
        choice = data["choices"][0]  # completion_json checked the shape
        msg = choice["message"]
        reasoning = msg.get("reasoning_content") or msg.get("reasoning") or msg.get("thinking")
        if reasoning is not None and not isinstance(reasoning, str):
            try:
                reasoning = model_json.dumps(reasoning)
            except ValueError as e:
                reasoning = f"(reasoning not shown: {e})"
        content = _text_of(msg.get("content"))
        calls, seen = [], set()
        for tc in msg.get("tool_calls") or []:
            fn = tc["function"]
            call_id = tc.get("id") if isinstance(tc.get("id"), str) and tc["id"] not in seen else new_call_id()
            seen.add(call_id)
            args, refused = fn.get("arguments"), None
            if not isinstance(args, str):  # a server that sends the arguments as JSON, not as its text
                try:
                    args = "" if args is None else model_json.dumps(args)
                except ValueError as e:  # nested past what may be read: the model hears why, nothing runs
                    args, refused = "", f"the arguments are not valid JSON ({e}); send one JSON object"
            calls.append(ToolCall(id=call_id, name=fn["name"], arguments=args, refused=refused))
        message: dict[str, Any] = {"role": "assistant", "content": content or ""}
        from_text, errors = False, []
        if not calls:
            # The server did not parse tool calls (no tool parser, or a template without tools):
            # read them from the text, but send the turn back exactly as the model wrote it, so
            # the model sees its own calls whatever the chat template does with `tool_calls`.
            parsed, rest, errors = parse_text_tool_calls(content)
            if parsed:
                calls, content, from_text = parsed, rest, True
        if calls and not from_text:
            message["tool_calls"] = [{"id": c.id, "type": "function",
                                      "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
        if self.send_reasoning and reasoning:
            message["reasoning_content"] = reasoning
        finish = choice.get("finish_reason")
        return ModelReply(content=content, tool_calls=calls, message=message, reasoning=reasoning,
                          finish_reason=finish if isinstance(finish, str) else None,
                          usage=_usage(data, messages, message), tool_calls_from_text=from_text,
                          tool_call_errors=errors,
                          logprobs=token_logprobs(choice.get("logprobs"), top=self.record_top))


def completion_json(content: bytes, content_type: Optional[str] = None) -> dict:
    """The JSON of a chat completion, checked for the parts we read; MalformedResponse (saying
    what came back, truncated) when it is not one."""
    kind = content_type or "no content type"
    if not content.strip():
        raise MalformedResponse(f"an empty body ({kind})")
    try:
        data = json.loads(content)
    except (ValueError, RecursionError):  # UnicodeDecodeError included; RecursionError: nested past reading
        raise MalformedResponse(f"a body that is not JSON ({kind}, {len(content):,} bytes): "
                                f"{excerpt(content)}") from None
    if not isinstance(data, dict):
        raise MalformedResponse(f"JSON that is not an object: {excerpt(content)}")
    choices = data.get("choices")
    if not choices:
        error = data.get("error")
        if error:  # some proxies answer 200 with an error object
            message = error.get("message") if isinstance(error, dict) else error
            raise MalformedResponse(f"an error instead of a completion: {excerpt(message or error)}")
        raise MalformedResponse(f"no choices: {excerpt(content)}")
    if not isinstance(choices, list) or not isinstance(choices[0], dict) \
            or not isinstance(choices[0].get("message"), dict):
        raise MalformedResponse(f"choices[0] has no message object: {excerpt(content)}")
    msg = choices[0]["message"]
    if msg.get("content") is not None and not isinstance(msg["content"], (str, list)):
        raise MalformedResponse(f"the message's content is neither text nor null: {excerpt(content)}")
    calls = msg.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise MalformedResponse(f"the message's tool_calls is not a list: {excerpt(content)}")
    for i, tc in enumerate(calls or []):
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise MalformedResponse(f"tool call {i} has no function with a name: {excerpt(content)}")
    return data


def _text_of(content: Any) -> Optional[str]:
    """The message's text: a string, or the text parts of a list of parts."""
    if isinstance(content, list):
        return "".join(p.get("text") or "" if isinstance(p, dict) else "" if isinstance(p, list) else str(p)
                       for p in content)
    return content


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _usage(data: dict, messages: list[dict], message: dict) -> Usage:
    u = data.get("usage")
    if not isinstance(u, dict) or not _int(u.get("prompt_tokens")):
        # estimate: ~4 characters a token
        sent = sum(len(json.dumps(m, ensure_ascii=False)) for m in messages)
        return Usage(prompt_tokens=sent // 4, completion_tokens=len(json.dumps(message, ensure_ascii=False)) // 4,
                     reported=False)
    details = u.get("completion_tokens_details")
    prompt = u.get("prompt_tokens_details") if isinstance(u.get("prompt_tokens_details"), dict) else {}
    # cache reads: OpenAI's field, else DeepSeek's and Moonshot's own; cache writes: OpenRouter's (priced apart)
    cached = next((n for n in (_int(prompt.get("cached_tokens")), _int(u.get("prompt_cache_hit_tokens")),
                               _int(u.get("cached_tokens"))) if n is not None), None)
    return Usage(prompt_tokens=_int(u["prompt_tokens"]) or 0, completion_tokens=_int(u.get("completion_tokens")) or 0,
                 reasoning_tokens=_int(details.get("reasoning_tokens")) if isinstance(details, dict) else None,
                 cached_tokens=cached, cache_write_tokens=_int(prompt.get("cache_write_tokens")))


def _error_text(e: Exception) -> str:
    """The server's error message (a JSON error's message, else the body), truncated."""
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return short(str(inner["message"]), EXCERPT_CHARS)
        if isinstance(inner, str):
            return short(inner, EXCERPT_CHARS)
        return excerpt(json.dumps(body, ensure_ascii=False))
    if isinstance(body, str) and body.strip():  # not JSON: a proxy's page
        return f"a body that is not JSON: {excerpt(body)}"
    return short(str(getattr(e, "message", None) or e), EXCERPT_CHARS)


def token_logprobs(data: Any, top: bool = True) -> Optional[list[dict]]:
    """The sampled tokens' log probabilities (`logprobs.content`), as [{token, logprob, top?}]
    (`top`: with the alternatives the server sent)."""
    content = data.get("content") if isinstance(data, dict) else None
    if not isinstance(content, list):
        return None
    out = []
    for t in content:
        if not isinstance(t, dict) or not isinstance(t.get("logprob"), (int, float)):
            continue
        entry: dict[str, Any] = {"token": t.get("token"), "logprob": t["logprob"]}
        alternatives = t.get("top_logprobs") if top else None
        if alternatives:
            entry["top"] = {x.get("token"): x.get("logprob") for x in alternatives if isinstance(x, dict)}
        out.append(entry)
    return out


class StreamedCompletion:
    """Chat-completion chunks put together: text and reasoning appended, tool calls by their
    index (a call's id and name come once, its arguments in pieces), usage from the last chunk."""

    def __init__(self):
        self.chunks = 0
        self.first_token_at: Optional[float] = None
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.reasoning_key = "reasoning_content"
        self.calls: dict[int, dict] = {}
        self.finish: Optional[str] = None
        self.usage: Optional[dict] = None
        self.logprobs: list[dict] = []
        self.meta: dict = {}

    def add(self, chunk: dict) -> list[tuple[str, str]]:
        """Take one chunk; returns the (kind, text) pieces of the answer it brought (a tool call's part with
        empty text); none for a chunk without any (a role, an empty delta, a finish reason, usage)."""
        self.chunks += 1
        if chunk.get("error"):
            raise MalformedResponse(f"an error in the stream: {excerpt(json.dumps(chunk['error']))}")
        if not self.meta:
            self.meta = {k: chunk.get(k) for k in ("id", "model", "created")}
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        pieces: list[tuple[str, str]] = []
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
            lp = choice.get("logprobs")
            if isinstance(lp, dict) and isinstance(lp.get("content"), list):
                self.logprobs.extend(lp["content"])
            for key in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(key), str) and delta[key]:
                    self.reasoning_key = key
                    self.reasoning.append(delta[key])
                    pieces.append(("reasoning", delta[key]))
            if isinstance(delta.get("content"), str) and delta["content"]:
                self.content.append(delta["content"])
                pieces.append(("content", delta["content"]))
            for tc in delta.get("tool_calls") or []:
                empty = {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                call = self.calls.setdefault(tc.get("index", len(self.calls)), empty)
                fn = tc.get("function") or {}
                if tc.get("id"):
                    call["id"] = tc["id"]
                if fn.get("name"):
                    call["function"]["name"] += fn["name"]
                if isinstance(fn.get("arguments"), str):
                    call["function"]["arguments"] += fn["arguments"]
                if tc.get("id") or fn.get("name") or fn.get("arguments"):
                    pieces.append(("tool_call", ""))
        if pieces and self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        return pieces

    def completion(self) -> dict:
        """The completion the chunks make up; MalformedResponse when the stream ended early."""
        if self.chunks == 0:
            raise MalformedResponse("an empty stream (a server that cannot stream with these settings fails this way, "
                                    "e.g. llama-cpp-python's function-calling format: try without --stream)")
        if self.finish is None:
            raise MalformedResponse(f"a stream cut short: {self.chunks} chunks and no finish reason")
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.reasoning:
            message[self.reasoning_key] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": self.finish}
        if self.logprobs:
            choice["logprobs"] = {"content": self.logprobs}
        data = dict(self.meta, object="chat.completion", choices=[choice])
        if self.usage:
            data["usage"] = self.usage
        return data
