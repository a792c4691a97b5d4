"""A deterministic model server that replays a script, speaking OpenAI chat completions
(`/v1/chat/completions`) and the Anthropic Messages API (`/v1/messages`, see
scripted_anthropic.py), each streamed (server-sent events) or not.

For tests, benchmarks and demos: it answers real HTTP requests, so the client, the
loop and the sandbox run exactly as they do against vLLM. The turn to play is the
number of assistant messages in the request, so the server keeps no conversation
state and serves any number of concurrent runs.

Script (JSON or YAML), one entry per model turn:

    {"name": "demo", "latency": 0.0, "turns": [
        {"tool": "execute_bash", "args": {"command": "ls"}},              # one call
        {"tool_calls": [{"name": "execute_bash", "arguments": {"command": "pwd"}},
                        {"name": "submit", "arguments": "{}"}],           # several calls
         "content": "optional text", "reasoning_content": "optional"},
        {"content": "a reply with no tool call"},
        {"tool": "submit", "as_text": true},            # written as <tool_call> text in content
        {"tool": "submit", "fail": {"status": 503, "times": 2}},  # first 2 tries fail
        {"tool": "submit", "fail": {"status": 200, "body": "<html>proxy error</html>",
                                    "content_type": "text/html"}},  # a 200 that is not JSON
        {"tool": "submit", "latency": 1.5, "usage": {"prompt_tokens": 7, "completion_tokens": 3}},
        {"content": "cut", "stop_reason": "max_tokens"}   # Messages API: this stop reason
    ]}

`arguments` may be a raw string (to send malformed JSON). Past the last turn the
server answers `submit`. Script-level keys: `latency` (seconds per call),
`context_window` (answer 400 like vLLM when prompt + max_tokens exceed it), `usage:
false` (send no usage), `llm_turns` (played instead of `turns` when the request offers no
tools, i.e. plain mode), `token_latency` (seconds between streamed events; a turn may set
its own), `cache_min_tokens` (Messages API: the shortest prefix cached), `match` (with
several scripts: pick the one whose `match` text
appears in the first user message, the longest such; else the script whose `name` is
the model), `owned_by` (its /models entry's, e.g. "vllm": a server serving only what it lists,
models/endpoint.py), `api_key` (requests without it get 401), `faults` (see below).

Faults. A turn's `fail` makes its first `times` tries (default 1) fail; a script's
`faults` list makes requests fail by their number instead, whatever the turn:
`{"requests": [3, 12], "status": 503}` (the 3rd to the 12th chat request this server
received, counted from 1; a single number for one request). Either holds one of:

    {"status": 503, "message": "..."}             # a JSON error body (status may be a list,
                                                  #   cycled over the failures: [500, 502, 503])
    {"status": 200, "body": "<html>..</html>", "content_type": "text/html"}  # a raw body
    {"status": 429, "headers": {"Retry-After": "2"}}                 # extra response headers
    {"status": 429, "retry_after_date": 2}      # Retry-After as an HTTP date 2 s ahead (whole seconds)
    {"hang": true}                # read the request, never answer (until the server stops)
    {"drop": true}                # close the connection without a word
    {"cut": 40}                   # the real reply's headers and first 40 bytes, then close;
                                  #   with "hang": true, stay silent instead of closing
    {"cut": 40, "length": false}  # the same without Content-Length (the body ends at the close)
    {"trickle": 0.2}              # the real reply, one byte every 0.2 s
    {"stall": 3}                  # a streamed request: the first 3 events, then silence
    {"stall": 3, "keepalive": 0.2}  # ...then, instead of silence, an event with no answer in it every 0.2 s
                                  #   (an empty {"role": "assistant"} delta; Messages API: an empty
                                  #   message_delta, as its SDK drops pings itself)

A request asking for `logprobs` gets one entry per 8-character piece of the text.

Every request is logged when it arrives (`ScriptedServer.requests`): `n` (its number),
`conv`, `turn`, `t_recv`, `authorization` (the header, to check which credentials came), then
`status`, `t_sent`, `fault` (its kind) and `headers` (the extra ones) as it is answered.
"""
from __future__ import annotations

import email.utils
import hashlib
import json
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional, Union

from . import scripted_anthropic
from .http_json import JSONHandler, QuietThreadingServer

ScriptLike = Union[dict, list, str, Path]

# JSON text to bytes: a lone surrogate a script holds goes out as its JSON escape (\ud800), as a server's would
_JSON_BYTES = ("utf-8", "backslashreplace")


def load_script(source: ScriptLike) -> list[dict]:
    """One script or a list of scripts, from a dict/list or a JSON/YAML file."""
    if isinstance(source, (str, Path)):
        text = Path(source).read_text(encoding="utf-8")
        if str(source).endswith((".yaml", ".yml")):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    else:
        data = source
    if isinstance(data, dict) and "scripts" in data:  # several scripts
        scripts = data["scripts"]
    elif isinstance(data, list) and data and all(isinstance(x, dict) and ("turns" in x or "llm_turns" in x)
                                                for x in data):
        scripts = data
    elif isinstance(data, list):  # a bare list of turns
        scripts = [{"turns": data}]
    else:
        scripts = [data]
    out = []
    for s in scripts:
        s = dict(s)
        s.setdefault("turns", [])
        out.append(s)
    return out


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return content or ""


def _pieces(text: str, size: int = 8) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def _calls_of(turn: dict) -> list[dict]:
    if "tool_calls" in turn:
        raw = turn["tool_calls"]
    elif "tool" in turn:
        raw = [{"name": turn["tool"], "arguments": turn.get("args", {})}]
    else:
        raw = []
    calls = []
    for c in raw:
        args = c.get("arguments", c.get("args", {}))
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False)
        calls.append({"id": c.get("id") or f"call_{uuid.uuid4().hex[:10]}", "type": "function",
                      "function": {"name": c["name"], "arguments": args}})
    return calls


class _State:
    def __init__(self, scripts: list[dict], latency: Optional[float], keep_requests: bool):
        self.scripts = scripts
        self.latency = latency
        self.keep_requests = keep_requests
        self.lock = threading.Lock()
        self.requests: list[dict] = []
        self.failures: dict[tuple, int] = {}
        self.count = 0  # chat requests received
        self.stopping = threading.Event()  # set on stop: hung answers give up
        self.prompt_cache: dict[str, int] = {}  # Messages API: cached prefix hash -> its tokens

    def number(self) -> int:
        with self.lock:
            self.count += 1
            return self.count

    def fault_for(self, script: dict, turn: dict, conv: str, index: int, n: int) -> Optional[tuple[dict, int]]:
        """The fault request `n` plays, if any, and how many failures of that spec came before it."""
        for fault in script.get("faults") or []:
            span = fault.get("requests", 1)
            first, last = (span, span) if isinstance(span, int) else (span[0], span[-1])
            if first <= n <= last:
                return fault, n - first
        fail = turn.get("fail")
        if fail:
            key = (conv, index)
            with self.lock:
                done = self.failures.get(key, 0)
                if done < int(fail.get("times", 1)):
                    self.failures[key] = done + 1
                    return fail, done
        return None

    def record(self, rec: dict) -> dict:
        """Log a request when it arrives (a client may give up before the answer); the handler
        fills in its status and reply on the returned dict."""
        if not self.keep_requests:
            rec = {k: v for k, v in rec.items() if k not in ("messages", "tools")}
        with self.lock:
            self.requests.append(rec)
        return rec

    def pick(self, model: str, first_user: str) -> dict:
        matching = [s for s in self.scripts if s.get("match") and s["match"] in first_user]
        if matching:
            return max(matching, key=lambda s: len(s["match"]))
        for s in self.scripts:
            if s.get("name") and s["name"] == model:
                return s
        for s in self.scripts:
            if not s.get("match"):
                return s
        raise KeyError("no script matches this conversation")


class _Handler(JSONHandler):
    server_version = "insandbox-scripted/1"

    def refused_key(self) -> bool:
        """A script with `api_key` makes the server answer 401 to requests without that key (sent as
        `Authorization: Bearer KEY` or `x-api-key: KEY`)."""
        keys = {s["api_key"] for s in self.server.state.scripts if s.get("api_key")}
        given = (self.headers.get("Authorization") or "").removeprefix("Bearer ") or self.headers.get("x-api-key")
        if not keys or given in keys:
            return False
        self.send_json(401, {"error": {"message": "invalid API key", "type": "authentication_error"}})
        return True

    def do_GET(self):
        state: _State = self.server.state
        path = self.route()
        if self.refused_key():
            return None
        if path.endswith("/models"):
            names = [s.get("name", "scripted") for s in state.scripts]
            # `owned_by` as the script says (e.g. "vllm", to be taken as a server that serves only what it lists)
            owners = [s.get("owned_by", "insandbox-scripted") for s in state.scripts]
            return self.send_json(200, {"object": "list", "data": [{"id": n, "object": "model", "owned_by": o}
                                                                   for n, o in zip(names, owners)]})
        if path.endswith("/health"):
            return self.send_json(200, {"ok": True})
        if path.endswith("/_requests"):
            with state.lock:
                return self.send_json(200, {"requests": state.requests})
        self.send_json(404, {"error": {"message": "not found"}})

    def do_POST(self):
        state: _State = self.server.state
        raw = self.read_body()
        path = self.route()
        if self.refused_key():
            return None
        anthropic = path.endswith("/messages")
        if not anthropic and not path.endswith("/chat/completions"):
            return self.send_json(404, {"error": {"message": "not found"}})
        t_recv = time.time()
        n = state.number()
        try:
            req = json.loads(raw)
            messages = req["messages"]
            if anthropic:
                scripted_anthropic.validate(req)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            if anthropic:
                return self.send_json(400, scripted_anthropic.error_body(400, str(e)))
            return self.send_json(400, {"error": {"message": f"bad request: {e}", "type": "invalid_request_error"}})
        if anthropic:
            first_user = scripted_anthropic.first_user_text(req)
        else:
            first_user = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
        try:
            script = state.pick(req.get("model", ""), first_user)
        except KeyError as e:
            return self.send_json(404, {"error": {"message": str(e)}})
        conv = hashlib.sha256(first_user.encode()).hexdigest()[:12]
        index = sum(1 for m in messages if m.get("role") == "assistant")
        turns = script["llm_turns"] if not req.get("tools") and "llm_turns" in script else script["turns"]
        turn = turns[index] if index < len(turns) else {"tool": "submit"}
        record = state.record({"n": n, "api": "messages" if anthropic else "chat", "conv": conv, "turn": index,
                               "t_recv": t_recv, "authorization": self.headers.get("Authorization"),
                               "messages": messages, "tools": req.get("tools"),
                               "params": {k: v for k, v in req.items() if k not in ("messages", "tools")}})

        latency = turn.get("latency", state.latency if state.latency is not None else script.get("latency", 0))
        if latency:  # before a scripted failure too: a request can take long and still fail
            time.sleep(latency)
        render = self.anthropic_message if anthropic else self.completion
        fault = state.fault_for(script, turn, conv, index, n)
        if fault and "stall" not in fault[0]:
            return self.play_fault(*fault, record, lambda: json.dumps(render(req, script, turn, messages, t_recv),
                                                                      ensure_ascii=False).encode(*_JSON_BYTES))
        prompt_tokens = max(1, len(json.dumps([req.get("system"), messages] if anthropic else messages)) // 4)
        window = script.get("context_window")
        want = req.get("max_tokens") or req.get("max_completion_tokens") or 0
        if window and prompt_tokens + want > window:
            record.update(status=400, t_sent=time.time())
            if anthropic:
                return self.send_json(400, scripted_anthropic.error_body(400, (
                    f"prompt is too long: {prompt_tokens + want} tokens > {window} maximum")))
            return self.send_json(400, {"error": {"type": "BadRequestError", "message": (
                f"This model's maximum context length is {window} tokens. However, you requested "
                f"{prompt_tokens + want} tokens ({prompt_tokens} in the messages, {want} in the completion). "
                "Please reduce the length of the messages or completion.")}})

        body = render(req, script, turn, messages, t_recv)
        reply = body["content"] if anthropic else body["choices"][0]["message"]
        record.update(status=200, reply=reply if state.keep_requests else None)
        if req.get("stream"):
            events = scripted_anthropic.stream_events(body) if anthropic else self.chunks(req, body)
            idle = None
            if fault and fault[0].get("keepalive"):
                idle = ("message_delta", {"type": "message_delta", "delta": {}, "usage": {}}) if anthropic else (None, {
                    **{k: body[k] for k in ("id", "created", "model")}, "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]})
            self.send_stream(events, float(turn.get("token_latency", script.get("token_latency", 0))),
                             fault[0].get("stall") if fault else None,
                             (float(fault[0]["keepalive"]), idle) if idle else None)
        else:
            self.send_raw(200, json.dumps(body, ensure_ascii=False).encode(*_JSON_BYTES), "application/json")
        record["t_sent"] = time.time()

    def send_stream(self, events: Iterator[tuple[Optional[str], Any]], gap: float, stall: Optional[int],
                    keepalive: Optional[tuple[float, tuple[Optional[str], Any]]] = None) -> None:
        """Server-sent events, `gap` seconds apart; with `stall`, silence after that many events, or with
        `keepalive` (seconds, event), that event again and again until the server stops."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for i, (name, data) in enumerate(events):
                if stall is not None and i >= int(stall):
                    while keepalive and not self.server.state.stopping.wait(keepalive[0]):
                        self.send_event(*keepalive[1])
                    self.server.state.stopping.wait()
                    return
                self.send_event(name, data)
                if gap:
                    time.sleep(gap)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up
            pass

    def send_event(self, name: Optional[str], data: Any) -> None:
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        self.wfile.write(((f"event: {name}\n" if name else "") + f"data: {text}\n\n").encode(*_JSON_BYTES))
        self.wfile.flush()

    def chunks(self, req: dict, body: dict) -> Iterator[tuple[Optional[str], Any]]:
        """A chat completion as the chunks of its stream (text in pieces of 8 characters)."""
        msg = body["choices"][0]["message"]
        base = {k: body[k] for k in ("id", "created", "model")}
        base["object"] = "chat.completion.chunk"

        def chunk(delta: dict, finish: Optional[str] = None, **extra) -> tuple[None, dict]:
            return None, dict(base, choices=[dict({"index": 0, "delta": delta, "finish_reason": finish}, **extra)])

        yield chunk({"role": "assistant", "content": ""})
        for key in ("reasoning_content", "reasoning"):
            for p in _pieces(msg.get(key) or ""):
                if p:
                    yield chunk({key: p})
        logprobs = body["choices"][0].get("logprobs")
        for i, p in enumerate(_pieces(msg.get("content") or "")):
            if p:
                extra = {"logprobs": {"content": logprobs["content"][i:i + 1]}} if logprobs else {}
                yield chunk({"content": p}, **extra)
        for i, c in enumerate(msg.get("tool_calls") or []):
            yield chunk({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                         "function": {"name": c["function"]["name"], "arguments": ""}}]})
            for p in _pieces(c["function"]["arguments"], 16):
                yield chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]})
        yield chunk({}, body["choices"][0]["finish_reason"])
        if body.get("usage") and (req.get("stream_options") or {}).get("include_usage"):
            yield None, dict(base, choices=[], usage=body["usage"])
        yield None, "[DONE]"

    def anthropic_message(self, req: dict, script: dict, turn: dict, messages: list, t_recv: float) -> dict:
        state: _State = self.server.state
        usage = None
        if script.get("usage", True) is not False:
            with state.lock:
                usage = scripted_anthropic.cached_usage(req, state.prompt_cache, int(script.get("cache_min_tokens", 0)))
        return scripted_anthropic.message(req, turn, _calls_of(turn), req.get("model", "scripted"), usage)

    def completion(self, req: dict, script: dict, turn: dict, messages: list, t_recv: float) -> dict:
        """The turn's chat completion, as the JSON of its body."""
        prompt_tokens = max(1, len(json.dumps(messages)) // 4)
        calls = _calls_of(turn)
        content = turn.get("content")
        if calls and turn.get("as_text"):
            blocks = [json.dumps({"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])})
                      for c in calls]
            content = (content or "") + "".join(f"\n<tool_call>\n{b}\n</tool_call>" for b in blocks)
            calls = []
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        for key in ("reasoning_content", "reasoning"):  # SGLang and older vLLM; vLLM >= 0.10
            if turn.get(key):
                message[key] = turn[key]
        body: dict[str, Any] = {
            "id": "chatcmpl-" + uuid.uuid4().hex[:16], "object": "chat.completion", "created": int(t_recv),
            "model": req.get("model", "scripted"),
            "choices": [{"index": 0, "message": message,
                         "finish_reason": turn.get("finish_reason", "tool_calls" if calls else "stop")}]}
        if script.get("usage", True) is not False:
            usage = {"prompt_tokens": prompt_tokens,
                     "completion_tokens": max(1, len(json.dumps(message)) // 4)}
            usage.update(turn.get("usage") or {})
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            body["usage"] = usage
        if req.get("logprobs") and content:  # one entry per 8-character piece, as the stream sends them
            body["choices"][0]["logprobs"] = {"content": [
                {"token": p, "logprob": -0.25 * (i % 4), "bytes": list(p.encode()),
                 "top_logprobs": [{"token": p, "logprob": -0.25 * (i % 4)}][:req.get("top_logprobs") or 0]}
                for i, p in enumerate(_pieces(content))]}
        return body

    def play_fault(self, fault: dict, k: int, record: dict, completion: Callable[[], bytes]) -> None:
        """Answer with fault `fault`, the `k`-th failure of its spec."""
        stopping = self.server.state.stopping
        kind = next((x for x in ("drop", "cut", "trickle", "hang") if fault.get(x) not in (None, False)), "status")
        record["fault"] = kind
        if kind in ("drop", "hang"):
            if kind == "hang":
                stopping.wait()
            self.close_connection = True
            if kind == "drop":
                record["t_sent"] = time.time()  # the close
            return
        status = fault.get("status", 200 if kind in ("cut", "trickle") else 500)
        status = int(status[k % len(status)] if isinstance(status, list) else status)
        headers = {str(h): str(v) for h, v in (fault.get("headers") or {}).items()}
        if "retry_after_date" in fault:
            headers["Retry-After"] = email.utils.formatdate(math.ceil(time.time() + float(fault["retry_after_date"])),
                                                            usegmt=True)
        if kind in ("cut", "trickle"):
            body, content_type = completion(), "application/json"
        elif "body" in fault:  # sent as is: a proxy's page, a truncated answer
            body, content_type = str(fault["body"]).encode(), fault.get("content_type", "text/html")
        else:
            body = json.dumps({"error": {"message": fault.get("message", "scripted failure")}}).encode()
            content_type = "application/json"
        record.update(status=status, headers=dict(headers), t_sent=time.time())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if fault.get("length", True) is False:
            headers["Connection"] = "close"
            self.close_connection = True
        else:
            headers["Content-Length"] = str(len(body))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        try:
            if kind == "cut":
                self.wfile.write(body[:int(fault["cut"])])
                self.wfile.flush()
                if fault.get("hang"):
                    stopping.wait()
                self.close_connection = True
            elif kind == "trickle":
                for i in range(len(body)):
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
                    if stopping.wait(float(fault["trickle"])):
                        break
                self.close_connection = True
            else:
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up
            self.close_connection = True


class ScriptedServer:
    """Serve scripts on a loopback port from a background thread.

        with ScriptedServer(script) as srv:
            client = OpenAIChatClient("scripted", base_url=srv.url)
    """

    def __init__(self, script: ScriptLike, host: str = "127.0.0.1", port: int = 0, latency: Optional[float] = None,
                 keep_requests: bool = True):
        self.httpd = QuietThreadingServer((host, port), _Handler)
        self.httpd.state = _State(load_script(script), latency, keep_requests)
        self.thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def requests(self) -> list[dict]:
        with self.httpd.state.lock:
            return list(self.httpd.state.requests)

    def start(self) -> ScriptedServer:
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       name="scripted-server", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.state.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        if self.thread:
            self.thread.join(5)

    def serve_forever(self) -> None:
        try:
            self.httpd.serve_forever(poll_interval=0.2)
        finally:
            self.httpd.server_close()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
