"""Client for any OpenAI-compatible chat-completions server (vLLM, SGLang, llama.cpp,
Ollama, OpenAI), through the official `openai` SDK.

The SDK retries 429, 5xx, timeouts and dropped connections with exponential backoff
(and honours Retry-After); we add what it does not do: retrying a 200 whose body is not
a chat completion (a proxy's HTML page, a truncated body), shrinking max_tokens when the
context overflows, switching to max_completion_tokens or dropping temperature for
models that refuse them, and reading tool calls written as text.

Tools always travel with `tool_choice` ("auto" unless configured): some servers
(llama-cpp-python's) read a request with tools but no tool_choice as "no tools".
"""
from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import time
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
MALFORMED_BACKOFF_S = (0.5, 8.0)  # first wait, longest wait


class MalformedResponse(Exception):
    """HTTP 200 with a body that is not a chat completion."""


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
                 tool_choice: Optional[str] = "auto"):
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
            self._client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key or "EMPTY",
                                              timeout=self.timeout, max_retries=self.max_retries, **kwargs)
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
        shrinks = malformed = 0
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
                try:
                    response = await client.chat.completions.create(**kwargs, messages=[], extra_body=body)
                except json.JSONDecodeError as e:  # declared JSON, but is not
                    raise MalformedResponse(f"a body that is not valid JSON ({e})") from None
                reply = self._reply(response, messages)
                break
            except MalformedResponse as e:
                malformed += 1
                if malformed > self.max_retries:
                    raise ModelError(f"the model server answered 200 with something that is not a chat completion, "
                                     f"{malformed} times in a row: {e}") from None
                notes.append(f"not a chat completion ({e}); retried")
                await asyncio.sleep(min(MALFORMED_BACKOFF_S[0] * 2 ** (malformed - 1), MALFORMED_BACKOFF_S[1]))
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
                raise ModelError(f"the model server rejected the request (400): {text}") from e
            except openai.AuthenticationError as e:
                raise ModelError(f"authentication failed at {self.base_url}: {_error_text(e)} (check --api-key)") from e
            except openai.NotFoundError as e:
                raise ModelError(f"not found at {self.base_url}: {_error_text(e)} (check --model, and that "
                                 "--base-url ends in /v1)") from e
            except openai.RateLimitError as e:
                raise ModelError(f"rate limited after {self.max_retries} retries: {_error_text(e)}") from e
            except openai.APIStatusError as e:
                raise ModelError(f"model server error {e.status_code} after {self.max_retries} retries: "
                                 f"{_error_text(e)}") from e
            except openai.APITimeoutError as e:
                raise ModelError(f"the model server did not answer within {self.timeout:g}s "
                                 f"({self.max_retries} retries)") from e
            except openai.APIConnectionError as e:
                raise ModelError(f"cannot reach the model server at {self.base_url} after {self.max_retries} "
                                 f"retries: {e.__cause__ or e}") from e
            except openai.APIError as e:  # other malformed responses and the like
                raise ModelError(f"bad answer from the model server: {e}") from e
        reply.latency_s = time.perf_counter() - t0
        reply.notes = notes
        return reply

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

    def _reply(self, response: Any, messages: list[dict]) -> ModelReply:
        choice = _first_choice(response)
        msg = choice.message
        extra = getattr(msg, "model_extra", None) or {}
        reasoning = (getattr(msg, "reasoning_content", None) or extra.get("reasoning_content")
                     or extra.get("reasoning") or extra.get("thinking"))
        if reasoning is not None and not isinstance(reasoning, str):
            reasoning = json.dumps(reasoning, ensure_ascii=False)
        content = msg.content
        calls, seen = [], set()
        for tc in msg.tool_calls or []:
            fn = getattr(tc, "function", None)
            if fn is None:
                continue
            call_id = tc.id if tc.id and tc.id not in seen else new_call_id()
            seen.add(call_id)
            args = fn.arguments if isinstance(fn.arguments, str) else json.dumps(fn.arguments)
            calls.append(ToolCall(id=call_id, name=fn.name or "", arguments=args or ""))
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
        return ModelReply(content=content, tool_calls=calls, message=message, reasoning=reasoning,
                          finish_reason=choice.finish_reason, usage=_usage(response, messages, message),
                          tool_calls_from_text=from_text, tool_call_errors=errors)


def _first_choice(response: Any) -> Any:
    """The first choice of a chat completion, or MalformedResponse when it is not one."""
    if isinstance(response, (str, bytes)):
        text = response if isinstance(response, str) else response.decode("utf-8", "replace")
        raise MalformedResponse(f"a body that is not JSON: {text[:200]!r}")
    choices = getattr(response, "choices", None)
    if not choices or getattr(choices[0], "message", None) is None:
        raise MalformedResponse(f"no choices: {str(response)[:200]}")
    return choices[0]


def _usage(response: Any, messages: list[dict], message: dict) -> Usage:
    u = getattr(response, "usage", None)
    if u is None or not getattr(u, "prompt_tokens", None):
        # estimate: ~4 characters a token
        sent = sum(len(json.dumps(m, ensure_ascii=False)) for m in messages)
        return Usage(prompt_tokens=sent // 4, completion_tokens=len(json.dumps(message, ensure_ascii=False)) // 4,
                     reported=False)
    details = getattr(u, "completion_tokens_details", None)
    cached = getattr(u, "prompt_tokens_details", None)
    return Usage(prompt_tokens=u.prompt_tokens or 0, completion_tokens=u.completion_tokens or 0,
                 reasoning_tokens=getattr(details, "reasoning_tokens", None) if details else None,
                 cached_tokens=getattr(cached, "cached_tokens", None) if cached else None)


def _error_text(e: Exception) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    return str(getattr(e, "message", None) or e)
