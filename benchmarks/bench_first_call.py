"""Time from a run's start to its first tool call in a sandbox, with and without a sandbox service.

    .venv/bin/python benchmarks/bench_first_call.py [--runs 20] [--size 4]

Each run is `insandbox.arun` in this process (imports and the first engine connection paid before the
clock starts, as a long-lived process would) against a scripted model that answers at once with one
execute_bash call, `date +%s.%N`: the time is from `arun` being called to that command running in the
sandbox (which shares this machine's clock). "started here": each run starts its own sandbox;
"served": it takes one from `insandbox pool serve --size SIZE`, warmed first.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the command says when it ran: the sandbox shares this machine's clock
SCRIPT = {"turns": [{"tool": "execute_bash", "args": {"command": "date +%s.%N"}}, {"tool": "submit"}]}


async def one(url: str, out: Path, pool_url: str | None) -> float:
    import insandbox

    t0 = time.time()
    result = await insandbox.arun("first call", model="scripted", base_url=url, output_dir=out, max_steps=3,
                                  network="none", pool_url=pool_url)
    return float(result.trajectory.steps[0].tool_calls[0].output.split()[0]) - t0


async def series(n: int, url: str, work: Path, pool_url: str | None) -> list[float]:
    await one(url, work / "warm", pool_url)  # imports, clients, the image looked at: not counted
    return [await one(url, work / f"r{i}", pool_url) for i in range(n)]


def main(a: argparse.Namespace) -> None:
    exe = str(Path(sys.executable).parent / "insandbox")
    with tempfile.TemporaryDirectory(prefix="insandbox-first-call-") as tmp:
        work = Path(tmp)
        from insandbox.models.scripted_server import ScriptedServer

        model = ScriptedServer(SCRIPT).start()  # its own thread: answers at once
        url = model.url
        sock = work / "pool.sock"
        service = subprocess.Popen([exe, "pool", "serve", "--size", str(a.size), "--socket", str(sock), "--network",
                                    "none"], stderr=subprocess.DEVNULL)
        try:
            while subprocess.run([exe, "pool", "status", "--pool-url", f"unix://{sock}"], capture_output=True,
                                 text=True).stdout.find(f"ready: {a.size}") < 0:
                time.sleep(0.5)
            rows = {"started here": asyncio.run(series(a.runs, url, work / "here", None)),
                    "served": asyncio.run(series(a.runs, url, work / "served", f"unix://{sock}"))}
        finally:
            service.terminate()
            service.wait(60)
            model.stop()
    print(f"\ntime from arun() to the first tool call, {a.runs} runs each (ms)\n")
    print(f"{'sandbox':>14} {'p50':>8} {'p90':>8} {'max':>8}")
    for name, xs in rows.items():
        xs = sorted(x * 1000 for x in xs)
        print(f"{name:>14} {statistics.median(xs):>8.1f} {xs[int(len(xs) * 0.9) - 1]:>8.1f} {xs[-1]:>8.1f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--size", type=int, default=4)
    main(ap.parse_args())
