"""Each server of the backend matrix through insandbox itself: time to first token as a streamed
step records it, and the loop's own overhead per step.

    .venv/bin/python benchmarks/bench_backends.py [--steps 6]

For each (server, API): one `insandbox` run (`arun`, streamed, `--tool-format text`, greedy, 24
tokens a reply, a real sandbox) of `--steps` steps. Per step the trajectory has when the request
went out, the model's latency (first token: `time_to_first_token_s`) and the tools' time; the
overhead of a step is what is left of the time to the next step's request: building the
messages, parsing the reply, the nudge or tool results, saving the trajectory. Medians over the
steps. Servers: llama.cpp's llama-server (chat completions and /v1/messages), llama-cpp-python's
server (`chatml`), and the scripted server (both APIs, no model time at all: the floor).
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from insandbox import arun  # noqa: E402
from insandbox.models.scripted_server import ScriptedServer  # noqa: E402
from tests import servers  # noqa: E402


def measure(label: str, api: str, model: str, url: str, steps: int, work: Path) -> list:
    result = asyncio.run(arun("List the files in /testbed, then write hello to /testbed/answer.txt.",
                              provider="anthropic" if api == "messages" else "openai", model=model, base_url=url,
                              max_steps=steps, max_tokens=24, temperature=0, tool_format="text", stream=True,
                              stuck_after=None, output_dir=work / label.replace(" ", "_")))
    s = result.trajectory.steps
    overhead = [b.started_at - a.started_at - a.model_latency_s - a.tool_time_s for a, b in zip(s, s[1:])]
    ttft = [x.time_to_first_token_s for x in s if x.time_to_first_token_s is not None]
    model = [x.model_latency_s for x in s]
    return [label, api, len(s), result.trajectory.exit_reason, statistics.median(ttft) * 1000,
            statistics.median(model) * 1000, statistics.median(overhead) * 1000 if overhead else float("nan")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        turns = [{"tool": "execute_bash", "args": {"command": "ls /testbed"}, "as_text": True}] * (args.steps - 1)
        with ScriptedServer({"turns": turns}) as srv:
            rows.append(measure("scripted", "chat", "scripted", srv.url, args.steps, work))
            rows.append(measure("scripted", "messages", "scripted", srv.url, args.steps, work))
        server = servers.start_llama_server(work)
        try:
            rows.append(measure("llama-server", "chat", server.model, server.base_url, args.steps, work))
            rows.append(measure("llama-server", "messages", server.model, server.root_url, args.steps, work))
        finally:
            servers.stop(server)
        server = servers.start_llama_cpp_python(work, "chatml")
        try:
            rows.append(measure("llama-cpp-python (chatml)", "chat", server.model, server.base_url, args.steps, work))
        finally:
            servers.stop(server)
    print("| server | API | steps | exit | time to first token p50 (ms) | model time p50 (ms) | "
          "loop overhead per step p50 (ms) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.0f} | {r[5]:.0f} | {r[6]:.1f} |")


if __name__ == "__main__":
    main()
