"""A scripted token-level upstream for the gateway's tests: vLLM's /v1/completions with token-id prompts,
answering with scripted turns as token ids (each with a made-up but fixed log-probability).

The turn to play is counted from the prompt's end-of-turn tokens (as rl/rollout/backends/scripted.py
does); it names the embedded model as its model, so the gateway loads that model's tokenizer. Knobs for
the tests: `delay` (seconds before answering: requests in flight), `token_ids=False` (an upstream that
cannot return ids), `calls` (every prompt it was sent)."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

from insandbox.models.local_server import default_gguf
from insandbox.rl.rollout.backends import load_gguf_tokenizer
from insandbox.rl.rollout.chat import ChatFormat


def tokenizer() -> Any:
    return load_gguf_tokenizer(default_gguf())


class TokenUpstream:
    def __init__(self, turns: list[str], delay: float = 0.0, token_ids: bool = True):
        self.tok = tokenizer()
        self.chat = ChatFormat(self.tok, [])
        self.stop = self.chat.stop_token_ids[0]
        probe = self.chat.prompt_ids([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
        self.prompt_stops = sum(1 for t in probe if t == self.stop)
        self.turns = turns
        self.delay = delay
        self.token_ids = token_ids
        self.calls: list[dict] = []
        self.server: Optional[ThreadingHTTPServer] = None

    def answer(self, req: dict) -> dict:
        prompt = req["prompt"]
        self.calls.append(req)
        if self.delay:
            time.sleep(self.delay)
        stops = sum(1 for t in prompt if t == self.stop)
        turn = max(stops - self.prompt_stops, 0) // 2
        text = self.turns[min(turn, len(self.turns) - 1)]
        ids = list(self.tok.encode(text, add_special_tokens=False))[: req["max_tokens"] - 1] + [self.stop]
        ids = ids[: req["max_tokens"]]
        choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": "stop" if ids[-1] == self.stop else
                                  "length"}
        if self.token_ids:
            choice["token_ids"] = ids
            choice["logprobs"] = {"token_logprobs": [-((i % 7) + 1) / 10 for i in range(len(ids))]}
        return {"object": "text_completion", "choices": [choice]}

    def start(self) -> str:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self.send(200, {"object": "list", "data": [{"id": default_gguf().stem}]})

            def do_POST(self):
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not self.path.endswith("/completions"):
                    return self.send(404, {"error": {"message": "not found"}})
                self.send(200, upstream.answer(req))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def stop_serving(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
