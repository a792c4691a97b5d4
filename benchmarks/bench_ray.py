"""`insandbox bench --ray` on this machine: samples per minute with 1, 2 and 4 Ray nodes, and what a
sample costs on Ray beyond what it costs with the local runner.

    .venv/bin/python benchmarks/bench_ray.py [--latency 0.5] [--calls 6] [--concurrency 8] [--samples 32]
                                             [--nodes 1 2 4] [--rounds 1] [--tasks]

A scripted model answers every call after `latency` seconds; each sample makes `calls` calls
(execute_bash `echo`s, writing the answer, submit) in its own sandbox, through the real bench
runner (results store, scoring, summary). The same samples run with the local runner, then on a
local Ray cluster (ray.cluster_utils.Cluster: a head and more Ray nodes, each its own raylet and
worker processes, all on this machine and its one Docker engine) of 1, 2 and 4 nodes, always
`concurrency` samples in flight in all. More nodes here add no capacity (one machine, one
engine): the figures show what the Ray path costs, not how it scales across machines.

Columns: samples/min over the whole run (the driver's wall clock, from the first sample to the
last record); "slot s/sample": wall x concurrency / samples, the time one slot of `concurrency`
spends per sample; "overhead/sample s": that minus the model's own time (latency x calls), i.e.
sandbox start and removal, tool calls, and for Ray the dispatch, the packing and unpacking of the
sample folder and the record's trip back; "vs local": the Ray overhead minus the local one;
"set-up s": the rest of the run's time (joining the cluster, starting the workers, preparing
each node, closing).

--tasks adds a variant with one Ray task per sample (each opening its own model client in a
worker process that Ray starts for it) instead of one async actor per node, to show why the
actor design was chosen.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench_throughput import TASK_YAML, script  # the same probe task and scripted model (benchmarks/ is on the path)

import insandbox
from insandbox.bench.runner import BenchConfig, BenchRun, run_bench
from insandbox.config import RunConfig
from insandbox.models.scripted_server import ScriptedServer


def start_cluster(nodes: int):
    from ray.cluster_utils import Cluster

    src = str(Path(insandbox.__file__).resolve().parents[1])  # the nodes' workers import this insandbox
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    return cluster


class TaskPerSample:
    """A SampleExecutor for comparison: every sample a Ray task of its own (its own model client)."""

    def __init__(self, address: str):
        from insandbox.distributed.cluster import connect

        self.connected = connect(address)
        self.fn = None

    async def start(self, bench: BenchRun) -> None:
        import ray

        from insandbox.distributed.bench import BenchNode

        def one_sample(args, row, repeat, mode):  # Ray tasks are plain functions: an event loop each
            async def go():
                node = BenchNode(*args)
                try:
                    return await node.run_sample(row, repeat, mode, False)
                finally:
                    await node.close()
            return asyncio.run(go())

        self.fn = ray.remote(num_cpus=0)(one_sample)
        self.args = (bench.cfg, bench.task, bench.prompts, bench.max_steps, bench._prices, None)

    async def run(self, bench: BenchRun, row, repeat: int, mode: str) -> dict:
        from insandbox.distributed.bench import sample_folder, unpack

        out = await self.fn.remote(self.args, row, repeat, mode)
        await asyncio.to_thread(unpack, out["files"], bench.run_dir / sample_folder(row.id, mode, repeat))
        return out["record"]

    async def close(self) -> None:
        from insandbox.distributed.cluster import disconnect

        if self.connected:
            disconnect()
            self.connected = False


async def measure(label: str, a: argparse.Namespace, work: Path, url: str, address=None, tasks=False) -> dict:
    """The round with the median samples/min of `a.rounds` runs (the machine is shared: one round can be unlucky)."""
    rounds = [await measure_once(label, a, work / f"{i}", url, address, tasks) for i in range(a.rounds)]
    return sorted(rounds, key=lambda r: r["per_min"])[len(rounds) // 2]


async def measure_once(label: str, a: argparse.Namespace, work: Path, url: str, address=None, tasks=False) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    data = work / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": f"s{i}", "problem_statement": f"Ray probe {i}.",
                                        "ground_truth": "done"}) + "\n" for i in range(a.samples)))
    task = work / "ray_probe.yaml"
    task.write_text(TASK_YAML)
    cfg = BenchConfig(task=str(task), data=data, concurrency=a.concurrency, output_dir=work / f"run-{label}",
                      run=RunConfig(model="scripted", base_url=url, max_steps=a.calls + 5))
    t0 = time.time()
    if tasks:
        executor = TaskPerSample(address)
        try:
            result = await BenchRun(cfg, executor=executor).run()
        finally:
            await executor.close()
    else:
        result = await run_bench(cfg, ray=address)
    total = time.time() - t0
    recs = result.records
    first = min(r["started_at"] for r in recs)
    wall = max(r["finished_at"] for r in recs) - first
    slot = wall * a.concurrency / len(recs)
    model_s = a.latency * a.calls
    return {"label": label, "samples": len(recs), "setup_s": total - wall,
            "errors": sum(1 for r in recs if r.get("error")),
            "correct": sum(1 for r in recs if r.get("score") == 1.0), "wall_s": wall,
            "per_min": len(recs) / wall * 60, "slot_s": slot, "overhead_s": slot - model_s,
            "sample_p50": statistics.median(r["wall_time_s"] for r in recs),
            "nodes": len({r.get("node") for r in recs}) if address else 0}


async def main(a: argparse.Namespace) -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="insandbox-bench-ray-") as tmp, \
            ScriptedServer(script(a.calls), latency=a.latency, keep_requests=False) as srv:
        work = Path(tmp)
        rows.append(await measure("local", a, work, srv.url))
        print(f"  local: {rows[-1]['wall_s']:.1f}s", flush=True)
        for n in a.nodes:
            t0 = time.time()
            cluster = start_cluster(n)
            print(f"  cluster of {n} node(s) up in {time.time() - t0:.0f}s", flush=True)
            try:
                rows.append(await measure(f"ray, {n} node(s)", a, work, srv.url, cluster.address))
                print(f"  {rows[-1]['label']}: {rows[-1]['wall_s']:.1f}s", flush=True)
                if a.tasks:
                    rows.append(await measure(f"ray tasks, {n} node(s)", a, work, srv.url, cluster.address,
                                              tasks=True))
                    print(f"  {rows[-1]['label']}: {rows[-1]['wall_s']:.1f}s", flush=True)
            finally:
                cluster.shutdown()
    local = rows[0]["overhead_s"]
    print(f"\nscripted model: {a.latency:g} s per call, {a.calls} calls per sample ({a.latency * a.calls:g} s of "
          f"model time), {a.samples} samples, concurrency {a.concurrency} (in all), median of {a.rounds} round(s); "
          f"{os.cpu_count()} CPUs\n")
    print(f"{'runner':<22} {'nodes used':>10} {'samples':>8} {'errors':>7} {'wall s':>7} {'samples/min':>12} "
          f"{'slot s/sample':>14} {'overhead/sample s':>18} {'vs local s':>11} {'sample p50 s':>13} {'set-up s':>9}")
    for r in rows:
        print(f"{r['label']:<22} {r['nodes'] or '-':>10} {r['samples']:>8} {r['errors']:>7} {r['wall_s']:>7.1f} "
              f"{r['per_min']:>12.1f} {r['slot_s']:>14.2f} {r['overhead_s']:>18.2f} {r['overhead_s'] - local:>11.2f} "
              f"{r['sample_p50']:>13.2f} {r['setup_s']:>9.1f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.5)
    ap.add_argument("--calls", type=int, default=6)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--rounds", type=int, default=1, help="runs of each; the median one is shown")
    ap.add_argument("--tasks", action="store_true", help="also one Ray task per sample")
    asyncio.run(main(ap.parse_args()))
