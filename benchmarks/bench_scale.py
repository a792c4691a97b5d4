"""Many sandboxes at once on one machine, through the real DockerSandbox and its admission gate.

    flock /tmp/insandbox-heavy.lock .venv/bin/python benchmarks/bench_scale.py --n 1024 --network bridge
    flock /tmp/insandbox-heavy.lock .venv/bin/python benchmarks/bench_scale.py --n 1024 256 --network none

For each size: start N sandboxes at once (default settings: 4g memory limit, 10g disk, the
network given), then report the time to start all, each sandbox's ready time (from the request,
queueing included) at p50/p95, what the host spent per sandbox (MemAvailable's drop and the sum
of the containers' cgroup memory, each / N; threads, file handles and dockerd's descriptors),
the round trip of `exec true` with all N alive and, for N > 256, again once only 256 are left,
and the time to remove them all. When starts stall (a Linux bridge takes 1,023 ports at most)
the benchmark says why the gate holds them, shows what the engine answers to a start the gate
would have held, closes as many sandboxes as are queued and times how the queue drains.

Every container it creates carries the run id scale-<hex>; they are all removed at the end,
also after a failure or Ctrl-C/SIGTERM.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import signal
import time
import uuid
from pathlib import Path

from insandbox.sandbox import SandboxLimits, SandboxSpec, admission, create_sandbox
from insandbox.sandbox.docker import LABEL_RUN, engine

MiB = 1 << 20
STALL_S = 30.0  # no sandbox became ready for this long while starts wait: the gate holds them


def pct(values: list[float], p: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round((len(v) - 1) * p / 100)))] if v else float("nan")


def cgroup_memory(cid: str) -> int:
    for path in (f"/sys/fs/cgroup/memory/docker/{cid}/memory.usage_in_bytes",
                 f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/memory.current",
                 f"/sys/fs/cgroup/docker/{cid}/memory.current"):
        try:
            return int(Path(path).read_text())
        except (OSError, ValueError):
            continue
    return 0


def host_figures() -> dict:
    mem = admission.meminfo()
    nr = Path("/proc/sys/fs/file-nr").read_text().split()
    dockerd = admission.Host().engine_pid("dockerd")
    return {"mem_available": mem["MemAvailable"], "tasks": admission.host_tasks() or 0, "files": int(nr[0]),
            "dockerd_fds": admission.open_fds(dockerd) or 0 if dockerd else 0,
            "own_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


async def exec_round_trips(sandboxes: list, rounds: int) -> list[float]:
    out = []
    for sb in random.sample(sandboxes, min(rounds, len(sandboxes))):
        t = time.perf_counter()
        res = await sb.exec(["true"])
        out.append(time.perf_counter() - t)
        assert res.exit_code == 0, res
    return out


async def one_size(n: int, network: str, rounds: int, run_id: str, image: str) -> dict:
    gate = admission.gate()
    row: dict = {"n": n, "network": network, "notes": []}
    gate.report_to(lambda text: (print(f"  [gate] {text}", flush=True), row["notes"].append(text)))
    spec = SandboxSpec(image=image, run_id=run_id, limits=SandboxLimits(network=network))
    before = host_figures()
    sandboxes = [create_sandbox(spec) for _ in range(n)]
    ready: dict[int, float] = {}
    failed: list[str] = []
    t0 = time.perf_counter()

    async def start(i: int) -> None:
        try:
            await sandboxes[i].start()
            ready[i] = time.perf_counter() - t0
        except Exception as e:  # recorded: the benchmark shows what failed and why
            failed.append(f"{type(e).__name__}: {e}")

    tasks = [asyncio.ensure_future(start(i)) for i in range(n)]
    try:
        return await measure(row, gate, spec, sandboxes, tasks, ready, failed, before, t0, rounds)
    finally:  # stopped half way: no start goes on behind the sweep's back
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(sb.close() for sb in sandboxes), return_exceptions=True)


async def measure(row, gate, spec, sandboxes, tasks, ready, failed, before, t0, rounds) -> dict:
    network = row["network"]
    last, stalled = 0, None
    while not all(t.done() for t in tasks):
        await asyncio.sleep(1.0)
        if len(ready) != last:
            last, stalled = len(ready), time.perf_counter()
            if last % 128 == 0:
                print(f"  {last} ready after {time.perf_counter() - t0:.1f} s", flush=True)
        elif stalled and time.perf_counter() - stalled > STALL_S and gate._queue:
            break
    if not all(t.done() for t in tasks):  # the gate holds the rest: see why, what the engine says, and drain
        held = sum(not t.done() for t in tasks)
        row["held"] = held
        row["held_after_s"] = time.perf_counter() - t0
        row["held_why"] = (gate.shortage(await gate.host.bridge_of(network)) or ("", "?"))[1]
        print(f"  {len(ready)} ready, {held} held by the gate: {row['held_why']}", flush=True)
        probe = create_sandbox(spec)
        gate.enabled = False  # what a start the gate holds back would meet
        t = time.perf_counter()
        try:
            await probe.start()
            row["unadmitted_start"] = "started"
            await probe.close()
        except Exception as e:
            row["unadmitted_start"] = f"failed after {time.perf_counter() - t:.2f} s: {e}"
        finally:
            gate.enabled = True
        print(f"  a start past the gate: {row['unadmitted_start']}", flush=True)
        alive = [sandboxes[i] for i in sorted(ready)]
        t = time.perf_counter()
        await close_all(alive[:held], row)
        await asyncio.gather(*tasks)
        row["drain_s"] = time.perf_counter() - t
        print(f"  closed {held}: the queue drained in {row['drain_s']:.1f} s", flush=True)
    row["start_all_s"] = time.perf_counter() - t0
    row["failed"] = failed
    alive = [sb for sb in sandboxes if sb.container_id and not sb._closed]
    row["alive"] = len(alive)
    row["ready_p50"], row["ready_p95"] = pct(list(ready.values()), 50), pct(list(ready.values()), 95)
    await asyncio.sleep(5.0)  # let the page cache and the engine settle
    after = host_figures()
    k = max(1, len(alive))
    own = max(0, after["own_rss"] - before["own_rss"])
    row["mem_per_sb"] = (before["mem_available"] - after["mem_available"] - own) / k
    row["cgroup_per_sb"] = sum(cgroup_memory(sb.container_id) for sb in alive) / k
    row["own_rss_per_sb"] = own / k
    row["tasks_per_sb"] = (after["tasks"] - before["tasks"]) / k
    row["files_per_sb"] = (after["files"] - before["files"]) / k
    row["dockerd_fds_per_sb"] = (after["dockerd_fds"] - before["dockerd_fds"]) / k
    row["exec_all"] = await exec_round_trips(alive, rounds)
    row["exec_256"] = None
    if len(alive) > 256:
        t = time.perf_counter()
        await close_all(alive[256:], row)
        row["remove_rest_s"] = time.perf_counter() - t
        alive = alive[:256]
        row["exec_256"] = await exec_round_trips(alive, rounds)
    t = time.perf_counter()
    await close_all(alive, row)
    row["remove_s"] = time.perf_counter() - t + row.get("remove_rest_s", 0.0)
    row["waits"], row["retries"] = gate.waits, gate.retries
    gate.waits = gate.retries = 0
    return row


async def close_all(sandboxes: list, row: dict) -> None:
    """Remove them at once; a removal the engine fails (it does, now and then, under hundreds at once:
    "unable to remove filesystem ... directory not empty") is counted and tried again."""
    results = await asyncio.gather(*(sb.close() for sb in sandboxes), return_exceptions=True)
    again = [sb for sb, r in zip(sandboxes, results) if isinstance(r, Exception)]
    row["removal_retries"] = row.get("removal_retries", 0) + len(again)
    for _ in range(5):
        if not again:
            return
        await asyncio.sleep(2.0)
        results = await asyncio.gather(*(sb.close() for sb in again), return_exceptions=True)
        again = [sb for sb, r in zip(again, results) if isinstance(r, Exception)]


def sweep(run_id: str) -> int:
    """Remove whatever of this run is left (a failure half way, a signal)."""
    api = engine.api()
    left = api.containers(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})
    for c in left:
        try:
            api.remove_container(c["Id"], force=True, v=True)
        except Exception:
            pass
    return len(left)


def ms(x: float) -> str:
    return f"{x * 1e3:.1f}"


def print_table(rows: list[dict]) -> None:
    lines = [("sandboxes", lambda r: f"{r['n']} ({r['network']})"),
             ("alive at once", lambda r: str(r["alive"]) + (f" (+{r['held']} held, then let in)" if r.get("held")
                                                             else "")),
             ("failed starts", lambda r: str(len(r["failed"]))),
             ("time to start all (s)", lambda r: f"{r['start_all_s']:.1f}"),
             ("ready time p50 / p95 (s)", lambda r: f"{r['ready_p50']:.1f} / {r['ready_p95']:.1f}"),
             ("host memory per sandbox, MemAvailable drop (MiB)", lambda r: f"{r['mem_per_sb'] / MiB:.1f}"),
             ("container cgroup memory per sandbox (MiB)", lambda r: f"{r['cgroup_per_sb'] / MiB:.1f}"),
             ("this process's memory per sandbox (MiB)", lambda r: f"{r['own_rss_per_sb'] / MiB:.2f}"),
             ("host threads per sandbox", lambda r: f"{r['tasks_per_sb']:.1f}"),
             ("host file handles per sandbox", lambda r: f"{r['files_per_sb']:.1f}"),
             ("dockerd descriptors per sandbox", lambda r: f"{r['dockerd_fds_per_sb']:.1f}"),
             ("exec round trip, all alive: p50 / p95 (ms)",
              lambda r: f"{ms(pct(r['exec_all'], 50))} / {ms(pct(r['exec_all'], 95))}"),
             ("exec round trip, 256 alive: p50 / p95 (ms)",
              lambda r: f"{ms(pct(r['exec_256'], 50))} / {ms(pct(r['exec_256'], 95))}" if r["exec_256"] else "-"),
             ("time to remove all (s)", lambda r: f"{r['remove_s']:.1f}"),
             ("starts that waited / retried", lambda r: f"{r['waits']} / {r['retries']}"),
             ("removals the engine failed (retried)", lambda r: str(r.get("removal_retries", 0)))]
    width = max(len(label) for label, _ in lines)
    cols = [[fn(r) for r in rows] for _, fn in lines]
    cw = max(len(c) for col in cols for c in col) + 2
    for (label, _), col in zip(lines, cols):
        print(f"{label:<{width}}" + "".join(f"{c:>{cw}}" for c in col))
    for r in rows:
        if r.get("held"):
            print(f"\n{r['n']} ({r['network']}): after {r['held_after_s']:.0f} s the gate held {r['held']}: "
                  f"{r['held_why']}\n  a start past the gate: {r['unadmitted_start']}\n"
                  f"  closing {r['held']} let them in: the queue drained in {r['drain_s']:.1f} s")
        for f in sorted(set(r["failed"]))[:5]:
            print(f"{r['n']} ({r['network']}) failed start: {f}")


async def main(sizes: list[int], network: str, rounds: int, image: str) -> None:
    run_id = f"scale-{uuid.uuid4().hex[:8]}"
    print(f"run id {run_id}; {os.cpu_count()} CPUs, "
          f"{admission.meminfo()['MemTotal'] / (1 << 30):.1f} GiB memory", flush=True)
    rows = []
    try:
        for n in sizes:
            print(f"{n} sandboxes, --network {network}", flush=True)
            rows.append(await one_size(n, network, rounds, run_id, image))
    finally:
        left = await engine.call(sweep, run_id)
        if left:
            print(f"removed {left} containers left over by this run", flush=True)
    print()
    print_table(rows)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1024, 256])
    ap.add_argument("--network", default="bridge")
    ap.add_argument("--rounds", type=int, default=200, help="exec round trips per measurement")
    ap.add_argument("--image", default="insandbox:latest")
    a = ap.parse_args()
    loop = asyncio.new_event_loop()
    main_task = loop.create_task(main(a.n, a.network, a.rounds, a.image))
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, main_task.cancel)  # the sweep in main() still runs
    loop.run_until_complete(main_task)
