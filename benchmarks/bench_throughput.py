"""Benchmark throughput: samples per minute at several concurrencies, against the ideal.

    .venv/bin/python benchmarks/bench_throughput.py [--latency 1.0] [--calls 10] [--concurrency 8 32 64] [--waves 2]
        [--no-pool | --no-recycle] [--backend docker|bwrap] [--network bridge|none|host] [--processes N]

A scripted model (its own process, like any model server) answers every call after `latency`
seconds; each sample makes `calls`
calls (execute_bash `echo`s, writing the answer, submit), each in its own sandbox, through
the real `insandbox bench` runner (results store, scoring, summary). With no overhead a
sample takes latency x calls, so the ideal (latency-bound) rate is
concurrency x 60 / (latency x calls) samples per minute. Each concurrency runs
`waves` x concurrency samples; `MiB/sandbox` is the host memory in use at the run's peak (MemAvailable's
drop) over the most sandboxes alive at once (the pool's size); `steady` counts only the samples that
finished after every slot had its first sandbox and before the slots drain, the rate once the engine's
start-up ramp is over.
By default samples take their sandboxes from the bench's
pool, which recycles them (sandbox/pool.py); --no-recycle keeps the pool but removes each
used sandbox, --no-pool gives every sample a sandbox of its own as before the pool.
--backend bwrap runs the sandboxes without a Docker engine (sandbox/bwrap/): it cannot recycle, so its
pool starts fresh sandboxes ahead and removes used ones.
--processes N runs the samples in N worker processes (`insandbox bench --processes`), each with its share
of the concurrency and a pool of its own (the containers/recycled columns are then the driver's: none).
--served SIZE runs each concurrency against a sandbox service (`insandbox pool serve --size SIZE`; with
--no-recycle, its default: each used sandbox removed and replaced; else `--recycle`) started, and waited
for until 90% of SIZE is ready, before the clock starts: the first wave finds its sandboxes warm. Printed
too: the service's CPU while idle and the host memory per ready sandbox.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

from insandbox.bench.runner import BenchConfig
from insandbox.config import RunConfig
from insandbox.distributed.bench import run_bench

TASK_YAML = """name: throughput
extends: _base
scorer: exact
instance_prompt: |-
  {problem_statement}
"""


def script(calls: int) -> dict:
    turns = [{"tool": "execute_bash", "args": {"command": f"echo step {i}"}} for i in range(calls - 2)]
    turns += [{"tool": "str_replace_editor", "args": {"command": "create", "path": "/testbed/answer.txt",
                                                      "file_text": "done"}}, {"tool": "submit"}]
    return {"turns": turns}


@contextlib.contextmanager
def model_server(turns: dict, latency: float, work: Path):
    """The scripted model in a process of its own, as a real model server is: in this process it
    would take the runner's own CPU (and GIL) from it."""
    path = work / "script.json"
    path.write_text(json.dumps(turns))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "insandbox", "scripted-server", str(path), "--port", str(port),
                             "--latency", str(latency)], stderr=subprocess.DEVNULL)
    srv = types.SimpleNamespace(url=f"http://127.0.0.1:{port}/v1", pid=proc.pid, cpu_s=None)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        yield srv
    finally:
        proc.terminate()
        _, status, usage = os.wait4(proc.pid, 0)  # its CPU time, for bench_cpu.py
        proc.returncode = os.waitstatus_to_exitcode(status)
        srv.cpu_s = usage.ru_utime + usage.ru_stime


def bench_config(concurrency: int, n: int, calls: int, work: Path, url: str, pool: bool = True,
                 recycle: bool = True, backend: str = "docker", network: str = "bridge",
                 pool_url: str | None = None) -> BenchConfig:
    """`n` samples of the throughput task against the scripted model at `url`, run folder work/run-<concurrency>."""
    data = work / f"rows-{concurrency}.jsonl"
    data.write_text("".join(json.dumps({"id": f"s{i}", "problem_statement": f"Throughput probe {i}.",
                                        "ground_truth": "done"}) + "\n" for i in range(n)))
    task = work / "throughput.yaml"
    task.write_text(TASK_YAML)
    return BenchConfig(task=str(task), data=data, concurrency=concurrency, output_dir=work / f"run-{concurrency}",
                       pool=pool, recycle=recycle, run=RunConfig(model="scripted", base_url=url, max_steps=calls + 5,
                                                                 backend=backend, network=network,
                                                                 pool_url=pool_url))


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


class MemoryWatch(threading.Thread):
    """The host's memory in use at the peak of a run: MemAvailable's largest drop from before the
    run (the containers, their shims, the engine's share and this process together), every 0.5 s."""

    def __init__(self):
        super().__init__(daemon=True)
        self.before, self.lowest, self.stop = mem_available(), None, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            now = mem_available()
            self.lowest = now if self.lowest is None else min(self.lowest, now)

    @property
    def peak_drop(self) -> int:
        return max(0, self.before - (self.lowest if self.lowest is not None else self.before))

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.join()


@contextlib.contextmanager
def sandbox_service(size: int, backend: str, network: str, work: Path, recycle: bool = False):
    """`insandbox pool serve` on a free port, waited for until 90% of `size` is ready; yields (url, figures)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    exe = str(Path(sys.executable).parent / "insandbox")
    before = mem_available()
    proc = subprocess.Popen([exe, "pool", "serve", "--size", str(size), "--port", str(port), "--backend", backend,
                             "--network", network, *(["--recycle"] if recycle else [])],
                            stdout=subprocess.DEVNULL, stderr=open(work / "service.log", "w"))
    try:
        t0 = time.monotonic()
        while True:
            out = subprocess.run([exe, "pool", "status", "--pool-url", url, "--json"], capture_output=True, text=True)
            if out.returncode == 0 and json.loads(out.stdout)["ready"] >= 0.9 * size:
                break
            if proc.poll() is not None or time.monotonic() - t0 > 600:
                raise RuntimeError(f"the service did not get ready: {(work / 'service.log').read_text()[-2000:]}")
            time.sleep(0.5)
        warm_s = time.monotonic() - t0
        time.sleep(3)  # settled: then the idle CPU is the service's own
        ticks = os.sysconf("SC_CLK_TCK")

        def cpu() -> float:
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / ticks
        c0, w0 = cpu(), time.monotonic()
        time.sleep(10)
        idle_cpu = (cpu() - c0) / (time.monotonic() - w0)
        ready = json.loads(subprocess.run([exe, "pool", "status", "--pool-url", url, "--json"], capture_output=True,
                                          text=True).stdout)["ready"]
        figures = {"warm_s": warm_s, "idle_cpu": idle_cpu,
                   "mib_per_ready": (before - mem_available()) / (1 << 20) / max(ready, 1),
                   "rss_mib": int(Path(f"/proc/{proc.pid}/statm").read_text().split()[1]) * 4096 / (1 << 20)}
        yield url, figures
    finally:
        proc.terminate()
        proc.wait(120)


async def measure(concurrency: int, n: int, latency: float, calls: int, work: Path, pool: bool = True,
                  recycle: bool = True, backend: str = "docker", network: str = "bridge", processes: int = 1,
                  served: int = 0) -> dict:
    with contextlib.ExitStack() as stack:
        url, service = (stack.enter_context(sandbox_service(served, backend, network, work, recycle)) if served
                        else (None, None))
        return {**await _measure(concurrency, n, latency, calls, work, pool, recycle, backend, network, processes,
                                 url), "service": service}


async def _measure(concurrency: int, n: int, latency: float, calls: int, work: Path, pool: bool, recycle: bool,
                   backend: str, network: str, processes: int, pool_url: str | None) -> dict:
    with model_server(script(calls), latency, work) as srv, MemoryWatch() as memory:
        cfg = bench_config(concurrency, n, calls, work, srv.url, pool, recycle, backend, network, pool_url)
        t0 = time.time()
        result = await run_bench(cfg, processes=processes)
        wall = time.time() - t0
    recs = result.records
    ok = [r for r in recs if r.get("score") == 1.0]
    ideal = concurrency * 60 / (latency * calls)
    pooled = result.summary["session"].get("sandbox_pool") or {}
    # steady state: from the moment every slot had its first sandbox (the engine's start-up ramp is
    # over) to one sample's length before the end (slots drain), samples finished per minute
    run_dir = work / f"run-{concurrency}"
    first = sorted(recs, key=lambda r: r["started_at"])[:concurrency]
    ramp_end = max(r["started_at"] + (json.loads((run_dir / r["trajectory"]).read_text())["sandbox"].get("ready_s")
                                      or 0.0) for r in first)
    drain = max(r["finished_at"] for r in recs) - latency * calls
    steady = (sum(1 for r in recs if ramp_end <= r["finished_at"] <= drain) / (drain - ramp_end) * 60
              if drain - ramp_end > latency * calls else None)
    return {"steady_per_min": steady, "ramp_s": ramp_end - min(r["started_at"] for r in recs),
            "started": pooled.get("started", len(recs)), "recycled": pooled.get("recycled", 0),
            "discarded": pooled.get("recycle_failures", 0),
            # the pool keeps at most concurrency + min(concurrency, 8) sandboxes alive (--pool-size's default)
            "mib_per_sandbox": memory.peak_drop / (1 << 20) / min(pooled.get("started") or concurrency,
                                                                   concurrency + min(concurrency, 8)),
            "concurrency": concurrency, "samples": len(recs), "correct": len(ok),
            "errors": sum(1 for r in recs if r.get("error")), "wall_s": wall,
            "per_min": len(recs) / wall * 60, "ideal_per_min": ideal,
            "sample_wall_p50": statistics.median(r["wall_time_s"] for r in recs),
            "overhead_per_sample_s": statistics.median(r["wall_time_s"] - latency * calls for r in recs)}


async def main(a: argparse.Namespace) -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="insandbox-throughput-") as tmp:
        for c in a.concurrency:
            rows.append(await measure(c, c * a.waves, a.latency, a.calls, Path(tmp), not a.no_pool, not a.no_recycle,
                                      a.backend, a.network, a.processes, a.served))
            r = rows[-1]
            print(f"  concurrency {c}: {r['samples']} samples in {r['wall_s']:.1f}s", flush=True)
    how = ("no pool" if a.no_pool else "pool without recycling" if a.no_recycle else "pool with recycling")
    if a.served:
        how = f"a sandbox service of {a.served} ({'recycled' if not a.no_recycle else 'fresh'} sandboxes)"
    print(f"\nscripted model: {a.latency:g} s per call, {a.calls} calls per sample, {a.waves} waves; {how}; "
          f"backend {a.backend}, --network {a.network}, --processes {a.processes}\n")
    print(f"{'concurrency':>11} {'samples':>8} {'errors':>7} {'wall s':>7} {'samples/min':>12} {'ideal/min':>10} "
          f"{'of ideal':>9} {'sample p50 s':>13} {'overhead/sample s':>18} {'containers':>11} {'recycled':>9} "
          f"{'discarded':>10} {'ramp s':>7} {'steady/min':>11} {'steady of ideal':>16} {'MiB/sandbox':>12}")
    for r in rows:
        print(f"{r['concurrency']:>11} {r['samples']:>8} {r['errors']:>7} {r['wall_s']:>7.1f} {r['per_min']:>12.1f} "
              f"{r['ideal_per_min']:>10.1f} {r['per_min'] / r['ideal_per_min']:>9.0%} {r['sample_wall_p50']:>13.1f} "
              f"{r['overhead_per_sample_s']:>18.2f} {r['started']:>11} {r['recycled']:>9} {r['discarded']:>10} "
              f"{r['ramp_s']:>7.1f} "
              + (f"{r['steady_per_min']:>11.1f} {r['steady_per_min'] / r['ideal_per_min']:>16.0%}"
                 if r['steady_per_min'] else f"{'-':>11} {'-':>16}") + f" {r['mib_per_sandbox']:>12.0f}")
    for r in rows:
        if r["service"]:
            s = r["service"]
            print(f"service (concurrency {r['concurrency']}): ready in {s['warm_s']:.1f} s; idle CPU "
                  f"{s['idle_cpu']:.1%} of a core; host memory per ready sandbox {s['mib_per_ready']:.0f} MiB; "
                  f"service RSS {s['rss_mib']:.0f} MiB")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=1.0)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[8, 32, 64])
    ap.add_argument("--waves", type=int, default=2)
    ap.add_argument("--no-pool", action="store_true", help="every sample starts and removes its own sandbox")
    ap.add_argument("--no-recycle", action="store_true", help="the pool removes used sandboxes instead")
    ap.add_argument("--backend", default="docker", help="sandbox backend: docker, or bwrap (no engine)")
    ap.add_argument("--network", default="bridge", help="the sandboxes' network mode")
    ap.add_argument("--processes", type=int, default=1, help="insandbox bench --processes: worker processes")
    ap.add_argument("--served", type=int, default=0, metavar="SIZE",
                    help="take sandboxes from a sandbox service of SIZE ready sandboxes (insandbox pool serve)")
    asyncio.run(main(ap.parse_args()))
