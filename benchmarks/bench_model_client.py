"""CPU per model request of the SDK clients' HTTP transports, against the scripted model server
(in a process of its own, answering at once), `--concurrency` requests in flight.

    .venv/bin/python benchmarks/bench_model_client.py [--requests 1200] [--concurrency 16]

Rows: httpx's own transport with a fresh connection per request (what loopback requests used
before models/http_transport.py), the same with kept-alive connections (what remote requests used),
the transport insandbox uses now (aiohttp under the SDK, fresh connections on loopback), and a bare
aiohttp request without the SDK (the floor). CPU is this process's (user + system) per request.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import openai
from bench_throughput import model_server, script

from insandbox.models.http_transport import sdk_http_client

SYSTEM = "You are in a sandbox. " * 150  # about the size of the real system prompt
TOOLS = [{"type": "function", "function": {"name": "execute_bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}}}}]


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def timed(send, n: int, concurrency: int) -> tuple[float, float]:
    body = {"model": "scripted", "messages": [{"role": "system", "content": SYSTEM},
                                              {"role": "user", "content": "Throughput probe 1."}], "tools": TOOLS}

    async def worker() -> None:
        for _ in range(n // concurrency):
            json.loads(await send(body))

    await worker()  # warm: imports, first connections
    c0, t0 = cpu(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    done = n // concurrency * concurrency
    return (cpu() - c0) / done * 1e3, (time.perf_counter() - t0) / done * 1e3


def through_sdk(client):
    async def send(body: dict) -> bytes:
        raw = await client.chat.completions.with_raw_response.create(model="scripted", messages=[],
                                                                     extra_body={k: v for k, v in body.items()
                                                                                 if k != "model"})
        return raw.http_response.content
    return send


def through_sdk_post(client):
    import httpx2

    async def send(body: dict) -> bytes:
        # the SDK's generic request (its documented way to any endpoint): no typed-params transform
        r = await client.post("/chat/completions", body=body, cast_to=httpx2.Response)
        return r.content
    return send


async def main(a) -> None:
    import aiohttp
    import httpx2

    with tempfile.TemporaryDirectory() as tmp, model_server(script(10), 0.0, Path(tmp)) as srv:
        fresh = httpx2.Limits(max_connections=1000, max_keepalive_connections=0)
        kept = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)
        rows = [("httpx, fresh connection per request", httpx2.AsyncClient(limits=fresh)),
                ("httpx, kept-alive connections", httpx2.AsyncClient(limits=kept)),
                ("insandbox (aiohttp under the SDK)", sdk_http_client(openai, srv.url, 600))]
        print(f"{a.requests} requests, {a.concurrency} at once, Python {sys.version.split()[0]}, "
              f"openai {openai.__version__}, aiohttp {aiohttp.__version__}\n")
        print(f"{'transport':<40} {'CPU ms/request':>15} {'wall ms/request':>16}")
        for name, http in rows:
            client = openai.AsyncOpenAI(base_url=srv.url, api_key="none", max_retries=0, http_client=http)
            c, w = await timed(through_sdk(client), a.requests, a.concurrency)
            await client.close()
            print(f"{name:<40} {c:>15.2f} {w:>16.2f}")
        client = openai.AsyncOpenAI(base_url=srv.url, api_key="none", max_retries=0,
                                    http_client=sdk_http_client(openai, srv.url, 600))
        c, w = await timed(through_sdk_post(client), a.requests, a.concurrency)
        await client.close()
        print(f"{'the same, through the SDK client.post':<40} {c:>15.2f} {w:>16.2f}")
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
            async def bare(body: dict) -> bytes:
                async with session.post(srv.url + "/chat/completions", json=body) as r:
                    return await r.read()
            c, w = await timed(bare, a.requests, a.concurrency)
        print(f"{'aiohttp without the SDK (floor)':<40} {c:>15.2f} {w:>16.2f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1200)
    ap.add_argument("--concurrency", type=int, default=16)
    asyncio.run(main(ap.parse_args()))
