"""The small HTTP plumbing our two model servers share (stdlib only)."""
from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional


class JSONHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

    def log_message(self, *args):  # quiet
        pass

    def send_json(self, code: int, obj: dict) -> None:
        self.send_raw(code, json.dumps(obj, ensure_ascii=False).encode(), "application/json")

    def send_raw(self, code: int, body: bytes, content_type: str, headers: Optional[dict] = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, str(value))
        self.end_headers()
        self.wfile.write(body)

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def route(self) -> str:
        """The request path without a trailing slash, e.g. /v1/chat/completions."""
        return self.path.split("?", 1)[0].rstrip("/")


class QuietThreadingServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # benchmarks open many connections at once
