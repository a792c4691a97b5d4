"""Retrying a model request, shared by every HTTP client (OpenAI chat completions, Anthropic messages).

The SDKs send the requests with their own retries off, so that every kind of failure shares
one budget of `max_retries` and each retry is noted in the step it delayed:

- 408, 409, 429 and 5xx answers (529 "overloaded" included), timeouts, refused or broken
  connections (whichever HTTP library raised it: httpx, httpx2, httpcore, ...), streams that
  stall, break or cannot be read, error events inside a 200 stream (by their error type:
  `overloaded_error` is retried, `invalid_request_error` is not), and a 200 whose body is not a
  completion are retried with exponential backoff (0.5 s doubling to 8 s, less up to a quarter
  at random);
- an error naming a server start-up flag ("tools param requires --jinja flag") is the server's
  configuration, the same on every try: never retried, and said with what to do
  (`SETUP_HINTS`);
- a `Retry-After` (or `retry-after-ms`) header, seconds or an HTTP date, is waited for
  exactly, up to `max_retry_after` (600 s): a server asking for more gets a clear error
  at once instead of a wait nobody expects.

The final error says what came back the last time, how many tries were made over how
long, and what failed on the way.
"""
from __future__ import annotations

import asyncio
import email.utils
import http.client
import json
import math
import random
import re
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import timezone
from typing import Any, Optional

from ..core.errors import InternalSignal
from ..core.redact import redact, secrets_in
from .base import ModelError

BACKOFF_S = (0.5, 8.0)  # first wait, longest wait
MAX_RETRY_AFTER_S = 600.0  # the longest Retry-After waited for
RETRY_STATUSES = frozenset({408, 409, 429})  # and every 5xx
EXCERPT_CHARS = 300
# what the SDKs' HTTP stack imports on its first request rather than at import time
LAZY_MODULES = ("httpcore2._backends.anyio", "httpcore._backends.anyio", "anyio._backends._asyncio",
                "opentelemetry.propagate")


class MalformedResponse(InternalSignal):
    """HTTP 200 with a body that is not a completion."""


class StreamStalled(InternalSignal):
    """A streamed answer sent nothing for longer than the stall timeout."""


class StreamBroken(InternalSignal):
    """Reading a streamed answer failed part way (the cause is the HTTP library's or the SDK's error)."""


# Errors whose message names how the server was started: retrying gets the same answer. Each
# pattern (matched on the server's message) gives what to tell the user.
SETUP_HINTS = (
    (re.compile(r"tools? param\w* requires --jinja", re.I),
     "llama-server takes tools only with its --jinja flag: restart it with --jinja, or run with "
     "--tool-format text (the tools then go in the system prompt)"),
    (re.compile(r"--enable-auto-tool-choice|--tool-call-parser", re.I),
     "start vLLM with --enable-auto-tool-choice --tool-call-parser <the model's parser>, or run with "
     "--tool-format text"),
    (re.compile(r"does not support tools", re.I),
     "this model or server takes no tools: run with --tool-format text"),
)
NAMES_A_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*\b")  # "--jinja", "--enable-x"


def setup_hint(text: str) -> Optional[str]:
    """What to do about a server error caused by how the server was started; None for other errors.
    A message that names a command-line flag is taken as such even when no hint here knows it."""
    for pattern, hint in SETUP_HINTS:
        if pattern.search(text):
            return hint
    if NAMES_A_FLAG.search(text):
        return "the server names a start-up flag: restart it with that flag set"
    return None


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


def short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text):,} characters)"


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


def status_failure(code: int, text: str, headers: Any, base_url: Optional[str], key_hint: str = "--api-key",
                   path_hint: str = "and that --base-url ends in /v1") -> Failure:
    """A failure from an HTTP error status, worded for the user, with the server's retry advice."""
    retry = code in RETRY_STATUSES or code >= 500
    hint = headers.get("x-should-retry") if headers is not None else None  # the server's own say
    if hint in ("true", "false"):
        retry = hint == "true"
    # the server's configuration: every retry would get the same answer (401/403/404/429 have
    # their own advice, and a flag named there may well be the client's)
    setup = setup_hint(text) if code >= 500 or code in (400, 422) else None
    if setup:
        retry = False
        text = f"{text} ({setup})"
    if code == 401:
        text = f"authentication failed at {base_url}: {text} (check {key_hint})"
    elif code == 404:
        text = f"not found at {base_url}: {text} (check --model, {path_hint})"
    elif code == 429:
        text = f"rate limited (429): {text}"
    elif code == 529:
        text = f"the model server is overloaded (529): {text}"
    elif code >= 500:
        text = f"model server error {code}: {text}"
    else:
        text = f"the model server rejected the request ({code}): {text}"
    return Failure(f"HTTP {code}", text, retry, retry_after_s(headers))


def rejected(text: str) -> Failure:
    """A 400: never retried; with what to do when the server says how it was started."""
    setup = setup_hint(text)
    return Failure("HTTP 400", f"the model server rejected the request (400): {text}"
                               + (f" ({setup})" if setup else ""), False)


class RetryBudget:
    """The tries of one request: `failed` waits before the next one, or raises the final ModelError."""

    def __init__(self, max_retries: int, backoff: tuple[float, float] = BACKOFF_S,
                 max_retry_after: float = MAX_RETRY_AFTER_S):
        self.max_retries, self.backoff, self.max_retry_after = max_retries, backoff, max_retry_after
        self.failures: list[Failure] = []
        self.notes: list[str] = []  # one per retry, for the step it delayed
        self.t0 = time.perf_counter()

    async def failed(self, failure: Failure, cause: BaseException) -> None:
        """Record a failed try; sleep until the next one, or raise ModelError when there is none."""
        self.failures.append(failure)
        if not failure.retry or len(self.failures) > self.max_retries:
            raise ModelError(self.gave_up(failure, self.failures[:-1])) from cause
        wait = failure.retry_after
        if wait is not None and wait > self.max_retry_after:
            raise ModelError(self.gave_up(Failure(failure.tag, (
                f"{failure.text}; the server asks to wait {wait:.0f} s before trying again (Retry-After), "
                f"longer than the {self.max_retry_after:g} s insandbox waits"), False), self.failures[:-1])) from cause
        asked = wait is not None and wait > 0
        if not asked:
            first, longest = self.backoff
            wait = min(first * 2 ** (len(self.failures) - 1), longest) * (1 - 0.25 * random.random())
        self.notes.append(f"{short(failure.text)}; retry {len(self.failures)} of {self.max_retries} "
                          f"in {wait:.2f} s" + (" (Retry-After)" if asked else ""))
        await asyncio.sleep(wait)

    def refuse(self, failure: Failure) -> str:
        """The final error for a failure that is never retried (a 400), with the tries before it."""
        return self.gave_up(failure, self.failures)

    def gave_up(self, last: Failure, earlier: list[Failure]) -> str:
        """The final error: the last failure, and what came before it."""
        if not earlier:
            return last.text if not last.retry else f"{last.text} (not retried: max retries {self.max_retries})"
        tries = len(earlier) + 1
        tally = ", ".join(f"{tag} x{n}" for tag, n in Counter(f.tag for f in [*earlier, last]).items())
        why = f"no retries left (max retries {self.max_retries})" if last.retry else "this one is not retried"
        return f"{last.text} ({tries} tries in {time.perf_counter() - self.t0:.1f} s: {tally}; {why})"


async def pump_stream(stream: Any, add, on_delta, stall_timeout: float, deadline: float, unit: str,
                      passthrough: tuple[type, ...] = ()) -> None:
    """Read an SDK stream to its end, handing each item (as a dict) to `add`, which returns the
    (kind, text) pieces of the answer it carried (text, reasoning, a tool call's part; empty text for
    what is not shown). `stall_timeout` seconds without such a piece raise StreamStalled: items that
    carry none (an empty `{"role": "assistant"}` delta, a ping) arrive but do not count, or a server
    sending them forever would hold the try until `deadline`. Passing `deadline` (perf_counter)
    raises asyncio.TimeoutError; any other failure to read the next item (a connection cut
    mid-body, an event that is not JSON), except the SDK's own `passthrough` errors, raises
    StreamBroken: a failed try, whichever library raised it. The stream is closed either way."""
    count = idle = 0  # items in all; items since the last piece of the answer
    last_content = time.perf_counter()  # the stall clock: restarted by pieces of the answer only
    try:
        items = stream.__aiter__()
        while True:
            now = time.perf_counter()
            stall_left = stall_timeout - (now - last_content)
            wait = min(stall_left, deadline - now)
            try:
                item = await asyncio.wait_for(items.__anext__(), max(wait, 0.001))
            except StopAsyncIteration:
                return
            except asyncio.TimeoutError:
                if wait < stall_left:
                    raise
                if idle:
                    raise StreamStalled(f"the model server's stream sent nothing for {stall_timeout:g} s but {idle} "
                                        f"{unit} without text, reasoning or a tool call ({count} {unit} had "
                                        "come)") from None
                raise StreamStalled(f"the model server's stream sent nothing for {stall_timeout:g} s "
                                    f"({count} {unit} had come)") from None
            except passthrough:
                raise
            except Exception as e:
                raise StreamBroken(f"after {count} {unit}") from e
            count += 1
            pieces = add(item.to_dict())
            if pieces:
                last_content, idle = time.perf_counter(), 0
            else:
                idle += 1
            for kind, text in pieces:
                if on_delta is not None and text:
                    on_delta(kind, text)
    finally:
        try:
            await stream.close()
        except Exception:  # closing a broken connection can fail too; the first error is the one to tell
            pass


# The HTTP stacks the SDKs use (httpx or the httpx2 they vendor, httpcore, h11, anyio), by package
# name with any version suffix: their errors are the network's, whatever the package is called.
TRANSPORT_PACKAGES = re.compile(r"^(httpx|httpcore|h11|h2|anyio|aiohttp)\d*$")
TRANSPORT_NAMES = frozenset({"RemoteProtocolError", "LocalProtocolError", "ProtocolError", "ReadError",
                             "WriteError", "NetworkError", "TransportError", "ConnectError", "IncompleteRead",
                             "ClosedResourceError", "BrokenResourceError", "EndOfStream"})


def transport_error(e: Optional[BaseException]) -> Optional[BaseException]:
    """The error in `e`'s chain (itself, then its causes) that is a broken or refused connection,
    judged by its classes (their package and name) rather than one library's classes; None if none is."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, (ConnectionError, http.client.IncompleteRead)):
            return e
        for cls in type(e).__mro__:
            if cls.__name__ in TRANSPORT_NAMES or TRANSPORT_PACKAGES.match(cls.__module__.split(".")[0]):
                return e
        e = e.__cause__ or e.__context__
    return None


def network_failure(e: BaseException, base_url: Optional[str], when: str = "") -> Failure:
    """A broken or refused connection (`e` from transport_error) as a retried Failure; `when` says
    how far the answer had come ("after 4 events of its stream")."""
    error = f"{type(e).__name__}: {e}"
    if "Timeout" in type(e).__name__:
        return Failure("timeout", f"the model server stopped answering{when and ' ' + when}: {error}", True)
    if type(e).__name__ == "ConnectError" or isinstance(e, ConnectionRefusedError):
        return connect_failure(e, base_url)
    return Failure("connection broken", f"the connection to the model server at {base_url} broke "
                                        f"{when or 'before a complete answer'}: {error}", True)


def connect_failure(e: BaseException, base_url: Optional[str]) -> Failure:
    """A connection that could not be made: a host name that does not resolve is said as such (no server
    was ever asked), anything else as refused."""
    error = f"{type(e).__name__}: {e}" if not str(e).startswith(type(e).__name__) else str(e)
    if is_dns_failure(e):
        return Failure("DNS lookup failed", f"cannot reach the model server at {base_url}: its host name does not "
                                            f"resolve (DNS lookup failed): {error}", True)
    return Failure("connection refused", f"cannot reach the model server at {base_url}: {error}", True)


def is_dns_failure(e: Optional[BaseException]) -> bool:
    """A host name that does not resolve, whichever HTTP library said it: socket.gaierror in the chain,
    an error class named for DNS, or the resolver's own words in the message."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, socket.gaierror) or isinstance(getattr(e, "os_error", None), socket.gaierror):
            return True
        if any("DNS" in cls.__name__ for cls in type(e).__mro__) or _RESOLVER_WORDS.search(str(e)):
            return True
        e = e.__cause__ or e.__context__
    return False


# what getaddrinfo says when a name does not resolve (glibc's, musl's and macOS's wordings)
_RESOLVER_WORDS = re.compile(r"Name or service not known|nodename nor servname|Temporary failure in name "
                             r"resolution|No address associated with hostname|Name does not resolve")


# The error types of an `error` event inside a 200 stream (the Messages API's), as the HTTP status
# the same error has outside a stream, so both are retried alike.
ERROR_EVENT_STATUS = {"invalid_request_error": 400, "authentication_error": 401, "billing_error": 402,
                      "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
                      "rate_limit_error": 429, "api_error": 500, "timeout_error": 504, "overloaded_error": 529}


def error_event_failure(body: Any, text: str, base_url: Optional[str], **hints: str) -> Failure:
    """An error event inside a 200 stream, retried as the same error outside a stream would be
    (a type not known here as a 500: retried)."""
    inner = body.get("error", body) if isinstance(body, dict) else None
    kind = inner.get("type") if isinstance(inner, dict) else None
    code = ERROR_EVENT_STATUS.get(kind, 500)
    retry = status_failure(code, text, None, base_url, **hints).retry
    return Failure(f"error event {kind or '(no type)'}", f"the model server's stream ended with an error event "
                                                         f"({kind or 'no type'}): {text}", retry)


def transport_failure(e: BaseException, sdk: Any, base_url: Optional[str], timeout: float, answer: str,
                      error_text, **hints: str) -> Failure:
    """A failed try of either SDK (`sdk`: the openai or anthropic module, whose error classes have the
    same names) as a Failure; `answer` names what a good body is ("a chat completion")."""
    if isinstance(e, MalformedResponse):
        return Failure(f"not {answer}", f"the model server answered 200 with something that is not {answer}: {e}",
                       True)
    if isinstance(e, StreamStalled):
        return Failure("stream stalled", str(e), True)
    if isinstance(e, StreamBroken):
        cause = e.__cause__
        broken = transport_error(cause)
        if broken is not None:
            return network_failure(broken, base_url, f"{e} of its stream")
        return Failure("stream unreadable", f"the model server's stream could not be read {e}: "
                                            f"{type(cause).__name__}: {short(str(cause))}", True)
    if isinstance(e, (asyncio.TimeoutError, sdk.APITimeoutError)):
        return Failure("timeout", f"the model server did not answer within {timeout:g}s", True)
    if isinstance(e, sdk.APIConnectionError):
        cause = e.__cause__ or e
        if type(cause).__name__ == "ConnectError":
            return connect_failure(cause, base_url)
        return Failure("connection broken", f"the connection to the model server at {base_url} broke "
                                            f"before a complete answer: {cause}", True)
    if isinstance(e, sdk.APIStatusError):
        if e.status_code < 400:  # an error event inside a 200 stream: judged by its error type
            return error_event_failure(getattr(e, "body", None), error_text(e), base_url, **hints)
        return status_failure(e.status_code, error_text(e), e.response.headers, base_url, **hints)
    if isinstance(e, sdk.APIError):  # an error event inside a stream
        return Failure("error event", f"the model server sent an error in its stream: {e}", True)
    return Failure(type(e).__name__, f"bad answer from the model server: {e}", False)


def broken_stream(e: BaseException, base_url: Optional[str]) -> Optional[Failure]:
    """A failure the SDK let through as the HTTP library's own error (a body cut mid-way): its
    Failure, or None for any other exception (a bug, to be raised)."""
    broken = transport_error(e)
    return None if broken is None else network_failure(broken, base_url)



_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(value):
    """The conversation with every lone surrogate (valid JSON from a server, "\\ud800", but no character:
    the SDK's JSON encoder refuses it) replaced by U+FFFD; everything else as it is, the same objects
    where nothing changed. Looked for first in the conversation's JSON (C speed: the walk below costs
    ~1 ms a call on a long conversation), walked only where one is."""
    try:
        if not _SURROGATE.search(json.dumps(value, ensure_ascii=False)):
            return value
    except (TypeError, ValueError):  # not all JSON: walk it
        pass
    return _encodable(value)


def _encodable(value):
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value) if _SURROGATE.search(value) else value
    if isinstance(value, list):
        out = [_encodable(v) for v in value]
        return value if all(a is b for a, b in zip(out, value)) else out
    if isinstance(value, dict):
        out = {k: _encodable(v) for k, v in value.items()}
        return value if all(out[k] is value[k] for k in value) else out
    return value

_MAKING_SDK = threading.Lock()


class SDKClient:
    """What the HTTP clients share around their SDK: the SDK client made on first use (its import
    runs on a thread, so an event loop busy starting a sandbox is not blocked, and before the
    request's clock starts), closed with them, and a failed request's time kept on the ModelError
    that ends it. A subclass gives `_sdk()` (make `self._client`), `_resource()` and
    `_complete(messages, tools, t0)`."""

    _client: Any = None
    _streaming: Any = None  # the same client over the transport for streamed answers (models/http_transport.py)
    _secrets: Optional[set[str]] = None
    base_url: Optional[str] = None
    api_key: Optional[str] = None
    extra_body: Optional[dict] = None
    server: None = None  # a remote endpoint: no local server started (models/base.py, ConfiguredClient)

    def _sdk(self) -> Any:
        raise NotImplementedError

    async def _ready_sdk(self) -> Any:
        if self._client is None:
            await asyncio.get_running_loop().run_in_executor(None, self._warm_sdk)
        return self._client

    def _warm_sdk(self) -> None:
        """Make the SDK client and load what its first request would load lazily (its API resource,
        the HTTP library's async backend, the tracing propagators), so none of it is timed as the model's."""
        import importlib

        with _MAKING_SDK:  # the first requests of many samples at once: one client, not one each (leaked)
            self._sdk()
        self._resource()
        for name in LAZY_MODULES:
            try:
                importlib.import_module(name)
            except Exception:  # absent in this SDK version, or failing to load: the request would say so
                pass

    def _resource(self) -> Any:
        """The SDK's API resource the requests go through (loaded on first use by the SDK)."""
        raise NotImplementedError

    async def close(self) -> None:
        for client in (self._streaming, self._client):
            if client is not None:
                await client.close()
        self._client = self._streaming = None

    async def complete(self, messages: list[dict], tools: Optional[list[dict]] = None):
        # the SDK is imported (seconds, the first time) before the clock starts: a step's model
        # time is the request's, not insandbox's own start-up
        await self._ready_sdk()
        messages = encodable(messages)
        t0 = time.perf_counter()
        try:
            reply = await self._complete(messages, tools, t0)
        except ModelError as e:
            e.latency_s = time.perf_counter() - t0
            e.args = tuple(self.redacted(a) if isinstance(a, str) else a for a in e.args)
            raise
        reply.notes = [self.redacted(n) for n in reply.notes]
        return reply

    def redacted(self, text: str) -> str:
        """Text to record or show, without the credentials of this client's URL, key and extra body
        (they reach error messages and retry notes through the URL and servers that echo requests)."""
        if self._secrets is None:
            self._secrets = secrets_in(self.base_url, self.extra_body, *([self.api_key] if self.api_key else []))
        return redact(text, self._secrets)

    async def _complete(self, messages: list[dict], tools: Optional[list[dict]], t0: float):
        raise NotImplementedError
