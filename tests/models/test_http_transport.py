"""The HTTP transport under the SDK clients (models/http_transport.py), through real sockets: a
fresh connection per request on loopback (no 40 ms Nagle stall on servers that write headers and
body apart), one client usable from one event loop after another, streamed answers on httpx."""
from __future__ import annotations

import asyncio
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from insandbox.models import OpenAIChatClient
from insandbox.models.anthropic_messages import AnthropicClient

COMPLETION = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}).encode()
MESSAGE = json.dumps({"id": "m", "type": "message", "role": "assistant", "model": "m", "stop_reason": "end_turn",
                      "content": [{"type": "text", "text": "hi"}], "usage": {"input_tokens": 1, "output_tokens": 1}}
                     ).encode()


@pytest.fixture
def nagle_server():
    """An HTTP/1.1 server that keeps connections alive, leaves Nagle on and writes headers and body
    apart (as some model servers do); it records the client port of every request."""
    ports: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            ports.append(self.client_address[1])
            body = MESSAGE if self.path.endswith("/messages") else COMPLETION
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}", ports
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_loopback_requests_take_a_fresh_connection_each_and_survive_a_new_event_loop(nagle_server, api):
    url, ports = nagle_server
    client = (OpenAIChatClient("m", base_url=url + "/v1") if api == "openai"
              else AnthropicClient("m", base_url=url))
    for _ in range(2):  # a second asyncio.run: the first loop's connections are gone with it
        async def three():
            return [await client.complete([{"role": "user", "content": "u"}]) for _ in range(3)]
        replies = asyncio.run(three())
        assert [r.content for r in replies] == ["hi"] * 3
    asyncio.run(client.close())
    assert len(ports) == 6 and len(set(ports)) == 6, ports  # one connection per request


def test_a_refused_connection_is_said_as_one_not_as_a_timeout():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    client = OpenAIChatClient("m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)

    async def go():
        try:
            await client.complete([{"role": "user", "content": "u"}])
        finally:
            await client.close()
    with pytest.raises(Exception, match=r"^cannot reach the model server at http://127\.0\.0\.1:\d+/v1"):
        asyncio.run(go())


def test_many_first_requests_at_once_make_one_sdk_client(nagle_server, monkeypatch):
    """Regression: each of the first requests of many samples made its own SDK client on a worker
    thread; all but the last were dropped unclosed, with their connections."""
    import openai

    made = []
    init = openai.AsyncOpenAI.__init__

    def counting(self, *args, **kwargs):
        made.append(self)
        init(self, *args, **kwargs)
    monkeypatch.setattr(openai.AsyncOpenAI, "__init__", counting)
    url, ports = nagle_server
    client = OpenAIChatClient("m", base_url=url + "/v1")

    async def many():
        try:
            return await asyncio.gather(*(client.complete([{"role": "user", "content": str(i)}]) for i in range(24)))
        finally:
            await client.close()
    assert [r.content for r in asyncio.run(many())] == ["hi"] * 24
    assert len(made) == 1 and len(ports) == 24
