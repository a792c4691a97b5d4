"""Third-party model servers side by side, on SmolLM2-135M: llama.cpp's llama-server,
llama-cpp-python's server (both chat formats the tests use), and insandbox's embedded server.

    .venv/bin/python benchmarks/bench_servers.py [--repeats 5]

Per server: spawn to ready; a short completion ("Say hi.", 16 tokens, greedy), streamed for the
time to first token, and not streamed for the whole request (median of --repeats); the agent's
first request (system prompt + tool schemas, 32 tokens), cold then warm (prompt cache). Every
server gets the same threads (tests/servers.py's threads()), one at a time. The llama-server
binary comes from scripts/build_llama_server.sh; its size is printed, its build time is that
script's own output.
"""
from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from insandbox.prompts import load_prompt_config  # noqa: E402
from insandbox.tools import default_tools  # noqa: E402
from tests import servers  # noqa: E402

SHORT = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 16, "temperature": 0}
TASK = "Write the word hello to /testbed/answer.txt."


def post(port: int, body: dict, stream: bool = False) -> tuple[float, float, dict]:
    """(seconds to the first content token or None, seconds to the end, the last JSON object)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps({**body, "model": "m", "stream": stream}),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    first, last = None, {}
    if not stream:
        last = json.loads(resp.read())
    else:
        for line in resp:  # server-sent events: `data: {...}` lines
            if line.startswith(b"data: {"):
                last = json.loads(line[6:])
                delta = (last.get("choices") or [{}])[0].get("delta") or {}
                if first is None and (delta.get("content") or delta.get("tool_calls")):
                    first = time.perf_counter() - t0
    conn.close()
    return first, time.perf_counter() - t0, last


def measure(server: servers.RunningServer, repeats: int, streams: bool) -> dict:
    port = int(server.root_url.rsplit(":", 1)[1])
    row = {"server": server.kind, "ready_s": server.started_s}
    post(port, SHORT)  # the first request of a fresh server pays for warm-up, measured below anyway
    if streams:
        row["ttft_s"] = statistics.median(post(port, SHORT, stream=True)[0] for _ in range(repeats))
    row["short_s"] = statistics.median(post(port, SHORT)[1] for _ in range(repeats))
    agent = {"messages": load_prompt_config().sandbox_messages(TASK), "tools": [t.schema() for t in default_tools()],
             "tool_choice": "auto", "max_tokens": 32, "temperature": 0}
    _, row["agent_cold_s"], body = post(port, agent)
    row["agent_prompt_tokens"] = (body.get("usage") or {}).get("prompt_tokens")
    row["agent_warm_s"] = post(port, agent)[1]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    binary, model = servers.llama_server_binary(), servers.gguf()
    logs = tempfile.TemporaryDirectory(prefix="bench-servers-")  # the servers' logs, while they run
    n = servers.threads()

    def llama_server(port):
        return [str(binary), "-m", str(model), "--jinja", "-c", str(servers.N_CTX), "-np", "1", "--seed", "42",
                "-t", str(n), "--host", "127.0.0.1", "--port", str(port), "--no-webui"]

    def llama_cpp_python(fmt):
        return lambda port: [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--chat_format", fmt,
                             "--n_ctx", str(servers.N_CTX), "--seed", "42", "--n_threads", str(n),
                             "--host", "127.0.0.1", "--port", str(port), "--verbose", "False"]

    def embedded(port):  # insandbox's own (no streaming; it takes every core: say so in the table)
        return [sys.executable, "-m", "insandbox.models.local_server", "--gguf", str(model), "--n-ctx",
                str(servers.N_CTX), "--port", str(port)]

    plan = [("llama-server", llama_server, "/health", True),
            ("llama-cpp-python (chatml-function-calling)", llama_cpp_python("chatml-function-calling"), "/v1/models",
             True),
            ("llama-cpp-python (chatml)", llama_cpp_python("chatml"), "/v1/models", True),
            ("insandbox embedded (all cores)", embedded, "/health", False)]
    rows = []
    for kind, argv, ready, streams in plan:
        server = servers.start(kind, argv, ready, Path(logs.name))
        try:
            rows.append(measure(server, args.repeats, streams))
        finally:
            servers.stop(server)
    logs.cleanup()
    print(f"llama-server binary: {binary} ({binary.stat().st_size / 2**20:.1f} MiB); {n} thread(s) per server; "
          f"median of {args.repeats}\n")
    print("| server | spawn to ready | first token, streamed (16-token reply) | whole 16-token reply "
          "| agent's first request, cold | same, warm | its prompt tokens |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ttft = f"{r['ttft_s'] * 1000:.0f} ms" if "ttft_s" in r else "no streaming"
        print(f"| {r['server']} | {r['ready_s']:.2f} s | {ttft} | {r['short_s'] * 1000:.0f} ms "
              f"| {r['agent_cold_s']:.2f} s | {r['agent_warm_s']:.2f} s | {r['agent_prompt_tokens']} |")


if __name__ == "__main__":
    main()
