"""The options for getting a sandbox to a sample fast, measured: a cold start, the pool's warm
sandboxes, recycling, the runtime, and ways of removing many containers.

    .venv/bin/python benchmarks/bench_pool.py [--rounds 40] [--removals 32]

Ready = from asking for a sandbox to its first command done (`true` in the shell):
- cold: a new container started for the request (what every sample paid before the pool);
- pool: taken from a pool whose sandboxes were started ahead or recycled while the previous
  sample ran (each round leaves files, a process and shell state behind, then releases it).
Recycle: what the pool spends in the background between two samples (kill, restore, new shell).
Removal: N stopped containers removed one after the other, 8 at a time (the pool's remover), all at once.
Runtime: a cold start under each OCI runtime the engine has (crun where it runs on this host).
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from insandbox.sandbox import SandboxSpec, create_sandbox
from insandbox.sandbox.docker import engine
from insandbox.sandbox.pool import SandboxPool

MESS = "echo x > /testbed/f; mkdir -p /root/junk; export A=1; cd /tmp; nohup sleep 300 >/dev/null 2>&1 &"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def row(label: str, xs: list[float], note: str = "") -> str:
    return (f"| {label} | {len(xs)} | {statistics.median(xs) * 1000:.1f} | {pct(xs, 0.95) * 1000:.1f} | "
            f"{max(xs) * 1000:.1f} | {note} |")


async def cold(rounds: int, runtime=None) -> list[float]:
    out = []
    for _ in range(rounds):
        spec = SandboxSpec(run_id="bench-pool")
        if runtime:
            spec.limits.runtime = runtime
        t0 = time.perf_counter()
        sb = create_sandbox(spec)
        await sb.start()
        await sb.run("true")
        out.append(time.perf_counter() - t0)
        await sb.close()
    return out


async def pooled(rounds: int) -> tuple[list[float], list[float], dict]:
    ready = []
    async with SandboxPool(SandboxSpec(run_id="bench-pool"), size=2) as pool:
        pool.expect(rounds)
        for _ in range(rounds):
            await asyncio.sleep(0.3)  # the previous sample's sandbox is recycled meanwhile (a model call takes longer)
            t0 = time.perf_counter()
            sb = await pool.acquire()
            await sb.run("true")
            ready.append(time.perf_counter() - t0)
            await sb.run(MESS)
            pool.release(sb)
        stats = pool.stats
    return ready, stats.recycle_s, stats.summary()


async def removal(n: int) -> list[tuple[str, float]]:
    api = engine.api()
    out = []
    for label, batch in (("one after the other", 1), ("8 at a time", 8), (f"all {n} at once", n)):
        sbs = []
        for _ in range(n):
            sb = create_sandbox(SandboxSpec(run_id="bench-pool"))
            await sb.start()
            sbs.append(sb)
        t0 = time.perf_counter()
        for i in range(0, n, batch):
            await asyncio.gather(*(sb.close() for sb in sbs[i:i + batch]))
        out.append((label, time.perf_counter() - t0))
    assert not api.containers(all=True, filters={"label": "insandbox.run_id=bench-pool"})
    return out


async def main(a: argparse.Namespace) -> None:
    print(f"ready = request to first command done; {a.rounds} rounds each\n")
    print("| how | n | p50 ms | p95 ms | max ms | note |\n|---|---|---|---|---|---|")
    print(row("cold start (runc, default disk limit)", await cold(a.rounds // 2)), flush=True)
    ready, recycle_s, summary = await pooled(a.rounds)
    print(row("from the pool", ready, f"{summary['started']} started, {summary['recycled']} recycled"), flush=True)
    print(row("recycle between samples (background)", recycle_s), flush=True)
    runtimes = sorted(engine.api().info().get("Runtimes") or {})
    for rt in runtimes:
        if rt in ("runc", "io.containerd.runc.v2", "io.containerd.runtime.v1.linux"):
            continue
        try:
            print(row(f"cold start, runtime {rt}", await cold(max(a.rounds // 4, 3), rt)), flush=True)
        except Exception as e:  # e.g. crun on a host with hybrid cgroups
            print(f"| cold start, runtime {rt} | 0 | - | - | - | fails here: {str(e)[-160:]} |")
    print(f"\nremoving {a.removals} containers\n\n| how | seconds | per container ms |\n|---|---|---|")
    for label, s in await removal(a.removals):
        print(f"| {label} | {s:.2f} | {s / a.removals * 1000:.0f} |", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--removals", type=int, default=32)
    asyncio.run(main(ap.parse_args()))
