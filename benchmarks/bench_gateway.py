"""What the token gateway adds to a turn: the same turns sent to a scripted token upstream directly and
through the gateway (tokenizing the new messages, recording the turn with an fsync), one session after
another and many sessions at once. Prints a table.

    .venv/bin/python benchmarks/bench_gateway.py --turns 8 --sessions 1 16
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.gateway.conftest import CALL, SUBMIT, Served  # noqa: E402
from tests.gateway.token_upstream import TokenUpstream  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "execute_bash", "description": "Run a command.", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
START = [{"role": "system", "content": "You are in a sandbox."}, {"role": "user", "content": "Count the files."}]
OUTPUT = "file.txt\n" * 40  # a tool result of ~400 characters


async def episode(http: httpx.AsyncClient, url: str, sid: str, turns: int, latencies: list[float]) -> None:
    messages = list(START)
    for _ in range(turns):
        t0 = time.perf_counter()
        r = await http.post(f"{url}/sessions/{sid}/v1/chat/completions", json={"messages": messages, "tools": TOOLS},
                            headers={"Authorization": "Bearer b"})
        latencies.append(time.perf_counter() - t0)
        reply = r.json()["choices"][0]["message"]
        messages.append(reply)
        for call in reply.get("tool_calls") or []:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": OUTPUT})


async def direct(http: httpx.AsyncClient, upstream_url: str, served: Served, turns: int, latencies: list[float]):
    """The upstream asked with the ids the gateway would send, without the gateway."""
    from insandbox.gateway.sessions import ChatFormats

    chat = ChatFormats(served.upstream.tok).get(TOOLS)
    context = chat.prompt_ids(START)
    for _ in range(turns):
        t0 = time.perf_counter()
        r = await http.post(f"{upstream_url}/completions", json={"prompt": context, "max_tokens": 256,
                                                                   "stop_token_ids": chat.stop_token_ids})
        latencies.append(time.perf_counter() - t0)
        context = context + r.json()["choices"][0]["token_ids"] + chat.observation_ids(
            [{"role": "user", "content": f"<tool_response>\n{OUTPUT}\n</tool_response>"}], True)


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(int(q * len(xs)), len(xs) - 1)] * 1000


async def measure(served: Served, turns: int, sessions: int) -> list[tuple]:
    rows = []
    # no keep-alive: a kept-alive httpx connection to uvicorn waits ~40 ms per request here (seen with any
    # uvicorn app, not the gateway's doing), which would hide what the gateway itself costs
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_keepalive_connections=0)) as http:
        for name in ("direct", "gateway"):
            latencies: list[float] = []
            t0 = time.perf_counter()
            if name == "direct":
                await asyncio.gather(*(direct(http, served.upstream_url, served, turns, latencies)
                                       for _ in range(sessions)))
            else:
                tag = f"s{sessions}-{time.monotonic_ns()}"
                await asyncio.gather(*(episode(http, served.url, f"{tag}-{i}", turns, latencies)
                                       for i in range(sessions)))
            wall = time.perf_counter() - t0
            rows.append((name, sessions, len(latencies), pct(latencies, 0.5), pct(latencies, 0.95),
                         statistics.mean(latencies) * 1000, len(latencies) / wall))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--sessions", type=int, nargs="+", default=[1, 16])
    a = ap.parse_args()
    calls = [CALL.format(f"ls /testbed/{i}") for i in range(a.turns)] + [SUBMIT]
    with tempfile.TemporaryDirectory() as store:
        served = Served(TokenUpstream(calls), Path(store))
        try:
            print("| path | sessions at once | turns | p50 ms | p95 ms | mean ms | turns/s |")
            print("|---|---|---|---|---|---|---|")
            for n in a.sessions:
                for row in asyncio.run(measure(served, a.turns, n)):
                    print("| {} | {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} |".format(*row))
        finally:
            served.close()


if __name__ == "__main__":
    main()
