"""Client for any OpenAI-compatible chat-completions server (vLLM, SGLang, llama.cpp,
Ollama, OpenAI), through the official `openai` SDK.

The SDK sends the requests; retrying is ours (the SDK's own retries are off), so every
kind of failure shares one budget of `max_retries` and each retry is noted in the step
it delayed:

- 408, 409, 429 and 5xx answers, timeouts, refused or broken connections (a body cut
  short), and a 200 whose body is not a chat completion (a proxy's HTML page, a truncated
  or empty body, JSON of another shape) are retried with exponential backoff (0.5 s
  doubling to 8 s, less up to a quarter at random);
- a `Retry-After` (or `retry-after-ms`) header, seconds or an HTTP date, is waited for
  exactly, up to `max_retry_after` (600 s): a server asking for more gets a clear error
  at once instead of a wait nobody expects (the SDK itself stops at 120 s);
- `timeout` bounds each try as a whole, also a server that trickles its answer byte by
  byte (the HTTP library's own timeouts only bound the gaps between bytes).

The final error says what came back the last time (a body excerpt, truncated), how
many tries were made over how long, and what failed on the way. We also shrink
max_tokens when the context overflows, switch to max_completion_tokens or drop
temperature for models that refuse them, and read tool calls written as text. Replies
are read from the raw JSON, checked for the shape of a chat completion.

Tools always travel with `tool_choice` ("auto" unless configured): some servers
(llama-cpp-python's) read a request with tools but no tool_choice as "no tools".
"""
from __future__ import annotations

import asyncio
import email.utils
import ipaddress
import json
import math
import random
import re
import time
from collections import Counter
from dataclasses import dataclass
from datetime import timezone
from typing import Any, Optional
from urllib.parse import urlparse

from ..tools.base import ToolCall
from .base import ContextLengthError, ModelError, ModelReply, Usage
from .tool_text import new_call_id, parse_text_tool_calls

CONTEXT_ERROR = re.compile(
    r"context length|context window|maximum context|context_length_exceeded|too many tokens|"
    r"exceeds? the (?:available )?context|prompt is too long|input is too long|reduce the length|"
    r"tokens exceed|exceed_context_size", re.I)
MIN_MAX_TOKENS = 16
MAX_SHRINKS = 4
BACKOFF_S = (0.5, 8.0)  # first wait, longest wait
MAX_RETRY_AFTER_S = 600.0  # the longest Retry-After waited for
RETRY_STATUSES = frozenset({408, 409, 429})  # and every 5xx
EXCERPT_CHARS = 300


class MalformedResponse(Exception):
    """HTTP 200 with a body that is not a chat completion."""


@dataclass
class Failure:
    """One failed try: what to say about it, and whether (and when) to try again."""

    tag: str  # short, for the tally in the final error: "HTTP 503", "timeout"
    text: str  # a sentence saying what happened
    retry: bool
    retry_after: Optional[float] = None  # seconds the server asked for (Retry-After), when it did


def excerpt(data: Any, limit: int = EXCERPT_CHARS) -> str:
    """What came back, quoted (control characters escaped), cut at `limit` characters."""
    text = data.decode("utf-8", "replace") if isinstance(data, (bytes, bytearray)) else str(data)
    text = text.strip()
    shown = repr(text[:limit])
    return shown + (f" ... ({len(text):,} characters in all)" if len(text) > limit else "")


def retry_after_s(headers: Any) -> Optional[float]:
    """Seconds a response asks the client to wait (`retry-after-ms`, or `Retry-After` as
    seconds or an HTTP date); None when it does not say. May be <= 0 (a date passed) or inf."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            value = float(ms) / 1000
            if not math.isnan(value):
                return value
        except ValueError:
            pass
    value = (headers.get("retry-after") or "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
        return None if math.isnan(seconds) else seconds
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp() - time.time()


def is_loopback(url: Optional[str]) -> bool:
    host = urlparse(url or "").hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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


class OpenAIChatClient:
    def __init__(self, model: str, base_url: Optional[str] = None, api_key: Optional[str] = None,
                 temperature: Optional[float] = None, max_tokens: Optional[int] = None,
                 extra_body: Optional[dict] = None, timeout: float = 600.0, max_retries: int = 5,
                 send_reasoning: bool = False, extra_params: Optional[dict] = None,
                 tool_choice: Optional[str] = "auto", backoff: tuple[float, float] = BACKOFF_S,
                 max_retry_after: float = MAX_RETRY_AFTER_S):
        self.name = model
        self.base_url = base_url
        self.api_key = api_key
        self.params: dict[str, Any] = {"model": model}
        if temperature is not None:
            self.params["temperature"] = temperature
        if max_tokens is not None:
            self.params["max_tokens"] = max_tokens
        if extra_body:
            self.params["extra_body"] = extra_body
        self.params.update(extra_params or {})
        self.timeout, self.max_retries = timeout, max_retries
        self.backoff, self.max_retry_after = backoff, max_retry_after
        self.send_reasoning = send_reasoning
        self.tool_choice = tool_choice  # None: never send one
        self._client = None

    def _sdk(self):
        if self._client is None:
            import openai

            kwargs: dict[str, Any] = {}
            if is_loopback(self.base_url):
                # A loopback connection costs ~0.1 ms; a fresh one per request avoids the 40 ms
                # stall (Nagle + delayed ACK) of servers that send headers and body in two writes.
                http_cls = getattr(openai, "DefaultAsyncHttpx2Client", None) or openai.DefaultAsyncHttpxClient
                limits = type(openai.DEFAULT_CONNECTION_LIMITS)(max_connections=1000, max_keepalive_connections=0)
                kwargs["http_client"] = http_cls(limits=limits, timeout=self.timeout)
            # max_retries=0: retrying is ours (see the module's docstring)
            self._client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key or "EMPTY",
                                              timeout=self.timeout, max_retries=0, **kwargs)
        return self._client

    async def _ready_sdk(self):
        """The SDK client, imported on a thread the first time (~0.4 s) so the event loop,
        busy starting the sandbox meanwhile, is not blocked."""
        if self._client is None:
            await asyncio.get_running_loop().run_in_executor(None, self._sdk)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def complete(self, messages: list[dict], tools: Optional[list[dict]] = None) -> ModelReply:
        t0 = time.perf_counter()
        try:
            return await self._complete(messages, tools, t0)
        except ModelError as e:
            e.latency_s = time.perf_counter() - t0
            raise

    async def _complete(self, messages: list[dict], tools: Optional[list[dict]], t0: float) -> ModelReply:
        client = await self._ready_sdk()
        import openai

        notes: list[str] = []
        failures: list[Failure] = []  # the tries that failed, in order
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
                data = await self._post(client, kwargs, body)
                reply = self._reply(data, messages)
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
                raise ModelError(self._gave_up(Failure("HTTP 400", f"the model server rejected the request "
                                                                  f"(400): {text}", False), failures, t0)) from e
            except (openai.APIError, MalformedResponse, asyncio.TimeoutError) as e:
                failure = self._failure(e)
                failures.append(failure)
                if not failure.retry or len(failures) > self.max_retries:
                    raise ModelError(self._gave_up(failure, failures[:-1], t0)) from e
                wait = failure.retry_after
                if wait is not None and wait > self.max_retry_after:
                    raise ModelError(self._gave_up(Failure(failure.tag, (
                        f"{failure.text}; the server asks to wait {wait:.0f} s before trying again (Retry-After), "
                        f"longer than the {self.max_retry_after:g} s insandbox waits"), False),
                        failures[:-1], t0)) from e
                asked = wait is not None and wait > 0
                if not asked:
                    first, longest = self.backoff
                    wait = min(first * 2 ** (len(failures) - 1), longest) * (1 - 0.25 * random.random())
                notes.append(f"{_short(failure.text)}; retry {len(failures)} of {self.max_retries} "
                             f"in {wait:.2f} s" + (" (Retry-After)" if asked else ""))
                await asyncio.sleep(wait)
        reply.latency_s = time.perf_counter() - t0
        reply.notes = notes
        return reply

    async def _post(self, client: Any, kwargs: dict, body: dict) -> dict:
        """One try: the completion's JSON, checked for shape. `timeout` bounds the whole try."""
        raw = await asyncio.wait_for(
            client.chat.completions.with_raw_response.create(**kwargs, messages=[], extra_body=body), self.timeout)
        return completion_json(raw.http_response.content, raw.http_response.headers.get("content-type"))

    def _failure(self, e: BaseException) -> Failure:
        import openai

        if isinstance(e, MalformedResponse):
            return Failure("not a chat completion",
                           f"the model server answered 200 with something that is not a chat completion: {e}", True)
        if isinstance(e, (asyncio.TimeoutError, openai.APITimeoutError)):
            return Failure("timeout", f"the model server did not answer within {self.timeout:g}s", True)
        if isinstance(e, openai.APIConnectionError):
            cause = e.__cause__ or e
            if type(cause).__name__ == "ConnectError":
                return Failure("connection refused", f"cannot reach the model server at {self.base_url}: {cause}", True)
            return Failure("connection broken", f"the connection to the model server at {self.base_url} broke "
                                                f"before a complete answer: {cause}", True)
        if isinstance(e, openai.APIStatusError):
            code, text = e.status_code, _error_text(e)
            retry = code in RETRY_STATUSES or code >= 500
            hint = e.response.headers.get("x-should-retry")  # the server's own say, where it has one
            if hint in ("true", "false"):
                retry = hint == "true"
            if code == 401:
                text = f"authentication failed at {self.base_url}: {text} (check --api-key)"
            elif code == 404:
                text = f"not found at {self.base_url}: {text} (check --model, and that --base-url ends in /v1)"
            elif code == 429:
                text = f"rate limited (429): {text}"
            elif code >= 500:
                text = f"model server error {code}: {text}"
            else:
                text = f"the model server rejected the request ({code}): {text}"
            return Failure(f"HTTP {code}", text, retry, retry_after_s(e.response.headers))
        return Failure(type(e).__name__, f"bad answer from the model server: {e}", False)

    def _gave_up(self, last: Failure, earlier: list[Failure], t0: float) -> str:
        """The final error: the last failure, and what came before it."""
        if not earlier:
            return last.text if not last.retry else f"{last.text} (not retried: max retries {self.max_retries})"
        tries = len(earlier) + 1
        tally = ", ".join(f"{tag} x{n}" for tag, n in Counter(f.tag for f in [*earlier, last]).items())
        why = f"no retries left (max retries {self.max_retries})" if last.retry else "this one is not retried"
        return f"{last.text} ({tries} tries in {time.perf_counter() - t0:.1f} s: {tally}; {why})"

    def _adapt(self, text: str, notes: list[str]) -> bool:
        """Fix parameters some models refuse (OpenAI reasoning models); True to retry."""
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
            reasoning = json.dumps(reasoning, ensure_ascii=False)
        content = _text_of(msg.get("content"))
        calls, seen = [], set()
        for tc in msg.get("tool_calls") or []:
            fn = tc["function"]
            call_id = tc.get("id") if isinstance(tc.get("id"), str) and tc["id"] not in seen else new_call_id()
            seen.add(call_id)
            args = fn.get("arguments")
            args = args if isinstance(args, str) else ("" if args is None else json.dumps(args, ensure_ascii=False))
            calls.append(ToolCall(id=call_id, name=fn["name"], arguments=args))
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
                          tool_call_errors=errors)


def completion_json(content: bytes, content_type: Optional[str] = None) -> dict:
    """The JSON of a chat completion, checked for the parts we read; MalformedResponse (saying
    what came back, truncated) when it is not one."""
    kind = content_type or "no content type"
    if not content.strip():
        raise MalformedResponse(f"an empty body ({kind})")
    try:
        data = json.loads(content)
    except ValueError:  # UnicodeDecodeError included
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
        return "".join(p.get("text") or "" if isinstance(p, dict) else str(p) for p in content)
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
            return _short(str(inner["message"]), EXCERPT_CHARS)
        if isinstance(inner, str):
            return _short(inner, EXCERPT_CHARS)
        return excerpt(json.dumps(body, ensure_ascii=False))
    if isinstance(body, str) and body.strip():  # not JSON: a proxy's page
        return f"a body that is not JSON: {excerpt(body)}"
    return _short(str(getattr(e, "message", None) or e), EXCERPT_CHARS)


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text):,} characters)"
