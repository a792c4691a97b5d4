"""The HTTP clients under our SDK clients (openai, anthropic).

Answers in one piece travel over aiohttp under the SDK's own httpx interface (httpx-aiohttp, the
adapter both SDKs name for their `aiohttp` extra): the SDK still builds every request, maps every
error and parses every response, and the bytes cost about half the CPU of httpx's own transport
(1.0 against 2.0 ms a request on 2 cores, benchmarks/bench_model_client.py). Streamed answers
keep httpx's transport: it hands over every byte that came before a cut, where aiohttp's reader
drops what it holds when the connection breaks, and a stream's cost is in its events anyway.

The adapter maps every aiohttp connection error to a connect *timeout*; ours says what happened
in httpx's own terms (refused, disconnected, cut), so models/retrying.py reports and retries it
as it does for httpx.

Loopback servers get a fresh connection per request: a connection costs ~0.1 ms there, and a
reused one stalls 40 ms on servers that write headers and body apart without TCP_NODELAY (Nagle
on their side, delayed ACK on ours). Remote servers keep their connections alive (and the proxies
of the environment).
"""
from __future__ import annotations

import asyncio
import functools
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from ..core.units import is_loopback

MAX_CONNECTIONS = 1000  # one per running sample at most; the SDKs' default too


@functools.cache
def _httpx_of(sdk: ModuleType) -> ModuleType:
    """The httpx generation this SDK is built on (httpx2 or httpx): it takes only its own clients."""
    base = importlib.import_module(f"{sdk.__name__}._base_client")
    return importlib.import_module("httpx2" if hasattr(base, "httpx2") else "httpx")


def _adapter(httpx_name: str) -> ModuleType:
    """httpx-aiohttp's module for that httpx generation."""
    return importlib.import_module("httpx_aiohttp.httpx2" if httpx_name == "httpx2" else "httpx_aiohttp")


@functools.cache
def _aiohttp_transport_class(httpx_name: str) -> type:
    """httpx-aiohttp's transport for `httpx_name`, its errors said as httpx would say them."""
    import aiohttp

    httpx = importlib.import_module(httpx_name)
    adapter = _adapter(httpx_name)

    def as_httpx(e: Exception, before_answer: bool) -> Exception:
        cause = e.__cause__ if isinstance(e.__cause__, aiohttp.ClientError) else e
        if isinstance(cause, (aiohttp.ServerTimeoutError, asyncio.TimeoutError)) or not isinstance(
                cause, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)):
            return e  # timeouts and the rest as the adapter mapped them
        if isinstance(cause, aiohttp.ClientConnectorError):
            return httpx.ConnectError(str(cause))
        if isinstance(cause, aiohttp.ServerDisconnectedError) and before_answer:
            return httpx.RemoteProtocolError("Server disconnected without sending a response")
        inner = cause.__cause__ or (cause.args[1] if len(cause.args) > 1 else None)  # the payload's own error
        message = getattr(inner, "message", None) or str(cause)
        return httpx.ReadError(f"the connection closed before the whole answer came: {message}")

    class Stream(httpx.AsyncByteStream):
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def __aiter__(self):
            try:
                async for chunk in self.inner:
                    yield chunk
            except httpx.TransportError as e:
                raise as_httpx(e, False) from e.__cause__

        async def aclose(self) -> None:
            await self.inner.aclose()

    class Transport(adapter.AiohttpTransport):
        def __init__(self, session: Callable[[], aiohttp.ClientSession]) -> None:
            super().__init__()
            self.new_session, self.session_loop = session, None

        async def handle_async_request(self, request):
            loop = asyncio.get_running_loop()
            if self.session_loop is not loop:  # a session serves the event loop it was made in only
                self.forget_session()
                self.client, self.session_loop = self.new_session(), loop
            try:
                response = await super().handle_async_request(request)
            except httpx.TransportError as e:
                raise as_httpx(e, True) from e.__cause__
            response.stream = Stream(response.stream)
            return response

        def forget_session(self) -> None:
            """Let go of a session whose event loop has ended (a client used by asyncio.run after asyncio.run)."""
            if isinstance(self.client, aiohttp.ClientSession):
                self.client.detach()  # its connections (none on loopback) went with their loop
            self.client = None

    return Transport


def sdk_http_client(sdk: ModuleType, base_url: str, timeout: float) -> Any:
    """The `http_client` for `sdk.AsyncOpenAI(...)` / `sdk.AsyncAnthropic(...)` at `base_url`, for
    answers in one piece."""
    import aiohttp

    if urlsplit(base_url).username is not None:
        # credentials in the URL: httpx sends them as basic auth beside the SDK's Authorization header,
        # aiohttp refuses the pair; such a server keeps httpx's transport
        return sdk_stream_client(sdk, base_url, timeout)
    httpx = _httpx_of(sdk)
    adapter = _adapter(httpx.__name__)
    client_cls = getattr(adapter, "Httpx2AiohttpClient", None) or adapter.HttpxAiohttpClient
    loopback = is_loopback(base_url)

    def session() -> aiohttp.ClientSession:  # made on the first request, inside the event loop
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=loopback, limit=MAX_CONNECTIONS),
                                     trust_env=not loopback)

    return client_cls(transport=_aiohttp_transport_class(httpx.__name__)(session), timeout=timeout,
                      follow_redirects=True)


def sdk_stream_client(sdk: ModuleType, base_url: str, timeout: float) -> Any:
    """The `http_client` for streamed answers, and for servers with credentials in their URL: httpx's own
    transport (see the module's docstring)."""
    httpx = _httpx_of(sdk)
    keep = 0 if is_loopback(base_url) else 100
    return httpx.AsyncClient(limits=httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=keep),
                             timeout=timeout, follow_redirects=True)


def sdk_post(client: Any, sdk: ModuleType, path: str, body: dict) -> Any:
    """POST `body` through the SDK client's own generic request (the SDKs' documented way to any
    endpoint): its headers, auth, errors and transport, the raw response back. Unlike `create`, it
    sends the JSON as it is, without walking every message through the typed-parameter transform
    (~0.15 ms a request at 2 messages, growing with the conversation: benchmarks/bench_model_client.py)."""
    return client.post(path, body=body, cast_to=_httpx_of(sdk).Response)
