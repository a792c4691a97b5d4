"""A gateway served in this process (uvicorn on a thread) over a scripted token upstream."""
from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from insandbox.gateway import make_app, prepare

from .token_upstream import TokenUpstream

CALL = '<tool_call>\n{{"name": "execute_bash", "arguments": {{"command": "{}"}}}}\n</tool_call>'
SUBMIT = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'


class Served:
    def __init__(self, upstream: TokenUpstream, store: Path, **kwargs):
        self.upstream = upstream
        self.upstream_url = upstream.start()
        self._start(store, **kwargs)

    def _start(self, store: Path, **kwargs) -> None:
        import uvicorn

        self.store = store
        self.loop = asyncio.new_event_loop()
        self.gateway = self.loop.run_until_complete(prepare(self.upstream_url, store, **kwargs))
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(make_app(self.gateway), log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=lambda: self.loop.run_until_complete(self.server.serve(sockets=[sock])),
                                       daemon=True)
        self.thread.start()
        for _ in range(200):
            if self.server.started:
                break
            time.sleep(0.02)

    def chat(self, sid: str, messages: list[dict], key: str = "k", **body) -> httpx.Response:
        return httpx.post(f"{self.url}/sessions/{sid}/v1/chat/completions", timeout=60,
                          headers={"Authorization": f"Bearer {key}"}, json={"messages": messages, **body})

    def records(self, sid: str) -> dict:
        return httpx.get(f"{self.url}/sessions/{sid}/records", timeout=60).json()

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.loop.run_until_complete(self.gateway.upstream.close())
        self.loop.close()
        self.upstream.stop_serving()


@pytest.fixture
def gateway_factory(tmp_path):
    made: list[Served] = []

    def make(turns: list[str], store: Path = None, **kwargs) -> Served:
        served = Served(TokenUpstream(turns, **{k: kwargs.pop(k) for k in ("delay", "token_ids") if k in kwargs}),
                        store or tmp_path / "store", **kwargs)
        made.append(served)
        return served

    yield make
    for served in made:
        served.close()
