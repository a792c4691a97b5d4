"""A model server of the tests' own that answers exactly what a test tells it to, byte for byte:
for faults the scripted server cannot play (a stream cut inside a tool call, an error event in a
200 stream, a tool call whose input is not JSON, a deterministic 500 naming a missing flag).

    with Misbehaving([sse([...events...], cut_after=3), sse([...])]) as srv:
        client = AnthropicClient("m", base_url=srv.url, stream=True)

Each POST gets the next answer of the list (the last one again once the list is used up), so a
test knows what every try saw; an answer may also be a function of the request's JSON body (to
play a server that answers by what it was asked). Streams are sent with chunked transfer encoding, as real servers
send them: a stream cut short is then a broken HTTP body, not a quiet end of file.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional, Union


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    events: Optional[list[tuple[Optional[str], Any]]] = None  # server-sent events instead of a body
    cut_after: Optional[int] = None  # send this many events, then close the connection mid-body
    headers: dict = field(default_factory=dict)


def reply(status: int, body: Any, **headers: str) -> Answer:
    """A whole JSON answer."""
    return Answer(status, json.dumps(body).encode(), headers=headers)


def sse(events: list[tuple[Optional[str], Any]], cut_after: Optional[int] = None) -> Answer:
    """A 200 event stream; with `cut_after`, the connection closes after that many events."""
    return Answer(events=events, cut_after=cut_after, content_type="text/event-stream")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):  # /v1/models, for clients that look
        self._send(reply(200, {"object": "list", "data": [{"id": "m", "object": "model"}]}))

    def do_POST(self):
        srv: Misbehaving = self.server.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        with srv.lock:
            srv.requests.append({"path": self.path, "body": body, "t_recv": time.time()})
            answer = srv.answers[min(len(srv.requests), len(srv.answers)) - 1]
        self._send(answer(body) if callable(answer) else answer)

    def _send(self, a: Answer) -> None:
        self.send_response(a.status)
        self.send_header("Content-Type", a.content_type)
        for name, value in a.headers.items():
            self.send_header(name, value)
        if a.events is None:
            self.send_header("Content-Length", str(len(a.body)))
            self.end_headers()
            self.wfile.write(a.body)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i, (name, data) in enumerate(a.events):
            if a.cut_after is not None and i >= a.cut_after:
                self.wfile.flush()
                self.close_connection = True  # no closing chunk: the body is cut
                return
            text = data if isinstance(data, str) else json.dumps(data)
            chunk = ((f"event: {name}\n" if name else "") + f"data: {text}\n\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


class Misbehaving:
    def __init__(self, answers: list[Union[Answer, Callable[[Any], Answer]]]):
        self.answers = answers
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.owner = self
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> Misbehaving:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


# ------------------------------------------------------------------ what the APIs send, to break

def anthropic_events(blocks: list[dict], stop: str = "tool_use", input_json: Optional[dict] = None
                     ) -> list[tuple[str, dict]]:
    """A Messages API stream of `blocks` (text or tool_use); a tool_use's input is streamed as the
    raw text `input_json[index]` when given (to send what is not JSON)."""
    events: list[tuple[str, dict]] = [("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [], "stop_reason": None,
        "usage": {"input_tokens": 10, "output_tokens": 1}}})]
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text", "text": ""}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                   "delta": {"type": "text_delta", "text": b["text"]}}))
        else:
            raw = (input_json or {}).get(i, json.dumps(b.get("input", {})))
            events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                "type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}}))
            for k in range(0, len(raw), 8):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "input_json_delta",
                                                                 "partial_json": raw[k:k + 8]}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": 20}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def anthropic_message(blocks: list[dict], stop: str = "tool_use") -> dict:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": blocks,
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 20}}


def chat_chunks(content: str = "", calls: tuple[tuple[str, str], ...] = (), finish: str = "tool_calls"
                ) -> list[tuple[None, Any]]:
    """A chat-completions stream: `content`, then each (name, raw arguments) call in pieces."""
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def chunk(delta: dict, reason: Optional[str] = None) -> tuple[None, dict]:
        return None, dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": reason}])

    out = [chunk({"role": "assistant", "content": content})]
    for i, (name, args) in enumerate(calls):
        out.append(chunk({"tool_calls": [{"index": i, "id": f"call_{i}", "type": "function",
                                          "function": {"name": name, "arguments": ""}}]}))
        for k in range(0, len(args), 8):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": args[k:k + 8]}}]}))
    out.append(chunk({}, finish))
    out.append((None, dict(base, choices=[], usage={"prompt_tokens": 10, "completion_tokens": 20,
                                                    "total_tokens": 30})))
    out.append((None, "[DONE]"))
    return out


def chat_completion(content: Optional[str] = None, calls: tuple[tuple[str, str], ...] = (),
                    finish: str = "tool_calls") -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                                 for i, (n, a) in enumerate(calls)]
    return {"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}}
