"""CPU per tool call: where the CPU of a run, a bench or an RL rollout batch goes, by component.

    .venv/bin/python benchmarks/bench_cpu.py [--what bench|run|rl|calls] [--concurrency 32] [--samples 192]
        [--calls 10] [--latency 1.0] [--steady K]

A scripted model answers every call after `latency` seconds; each sample (run, rollout) makes
`calls` tool calls: `echo`s, then writing the answer (and submitting, which bench and run count as
a tool call too). `bench` runs the real bench runner (bench_throughput.py's task, its scripted model
server in a process of its own, the rich progress bar drawn to /dev/null); `run` runs `samples` runs
one after another (session.arun, as `insandbox run`); `rl` a batch of token-level rollouts
(Rollouts.run_groups, the scripted generator in this process, SmolLM2's tokenizer); `calls` starts one
sandbox and makes `samples` x `calls` `echo` calls in it, `concurrency` sandboxes at once, no model:
what a tool call costs once the sandbox runs (the engine's share is the attach stream's).

The table, in CPU seconds and in ms per tool call made:
  insandbox   this process (every thread: the runner, the SDK, the trajectories' JSON, the progress)
              and its children, less the model server and the sampler thread of this script
  model       the scripted model server's process (bench and run; rl's generator is in this process)
  containers  the sandbox containers of this process, from their cgroups (cgroup v1 cpuacct.usage or
              v2 cpu.stat usage_usec): the in-container server, the shell, the commands; read before
              each container is removed
  engine      dockerd, containerd, the containerd shims, runc (where a sample catches it), docker-proxy: a
              delta over the run of each process's own CPU, sampled every 0.5 s so that shims that exit
              are counted up to their last sample, by process name. The engine is shared: other
              containers on this machine count too, so the idle rate measured for 3 s before the run is
              shown and taken off ("engine - idle"). "(reaped by it)": the CPU of the children the
              engine's processes waited for, shown and not added: the runc calls of the shims, but also
              each container's first process once it exits, whose CPU is the containers' row again
  --steady K  the same workload again with K times the samples; the last column is the difference, the
              steady state's CPU per tool call without what a workload pays once (imports, first starts)
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import tempfile
import threading
import time
from pathlib import Path

from bench_throughput import bench_config, model_server, script

from insandbox.sandbox.docker import backend

TICK = os.sysconf("SC_CLK_TCK")
ENGINE = ("dockerd", "containerd", "containerd-shim", "docker-proxy", "runc")  # comm: at most 15 characters


# ------------------------------------------------------------------ the engine's processes
def _stat(pid: str) -> tuple[str, float, float] | None:
    """(comm, utime + stime, cutime + cstime) of a process in seconds, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    comm = raw[raw.index(b"(") + 1:raw.rindex(b")")].decode(errors="replace")
    fields = raw[raw.rindex(b")") + 2:].split()
    return comm, (int(fields[11]) + int(fields[12])) / TICK, (int(fields[13]) + int(fields[14])) / TICK


class EngineWatch(threading.Thread):
    """Samples the engine's processes every `every` seconds: CPU per pid, first and last seen."""

    def __init__(self, every: float = 0.5):
        super().__init__(daemon=True)
        self.every, self.first, self.last, self.comm = every, {}, {}, {}
        self.children_first: dict[str, float] = {}
        self.children_last: dict[str, float] = {}
        self.stop_ = threading.Event()
        self.own_cpu = 0.0  # this thread's CPU, taken off this process's
        self.started_with: set[str] = set()

    def sample(self) -> None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            if pid not in self.last:
                try:
                    with open(f"/proc/{pid}/comm") as f:
                        comm = f.read().strip()
                except OSError:
                    continue
                if comm not in ENGINE:
                    self.last[pid] = None  # not the engine's: never read again (pids are not reused in a run)
                    continue
                self.comm[pid] = comm
            elif self.last[pid] is None:
                continue
            s = _stat(pid)
            if s is None:
                continue
            if pid not in self.first:  # a process that started after the first sample counts from 0
                self.first[pid] = s[1] if pid in self.started_with else 0.0
                self.children_first[pid] = s[2] if pid in self.started_with else 0.0
            self.last[pid], self.children_last[pid] = s[1], s[2]

    def total(self) -> float:
        return sum(self.by_process().values())

    def reaped(self) -> float:
        """CPU of the engine's processes' children that they waited for: the runc invocations of the
        shims, but also each container's first process (with all it reaped) once it exits, which is
        the containers' own CPU again. Shown, not added: the table would count the containers twice."""
        return sum(v - self.children_first.get(p, 0.0) for p, v in self.children_last.items())

    def by_process(self) -> dict[str, float]:
        """CPU seconds by process name (all the shims together, ...)."""
        out: dict[str, float] = {}
        for p, v in self.last.items():
            if v is not None:
                out[self.comm[p]] = out.get(self.comm[p], 0.0) + v - self.first.get(p, 0.0)
        return out

    def run(self) -> None:
        t0 = time.thread_time()
        while not self.stop_.is_set():
            self.sample()
            self.own_cpu = time.thread_time() - t0
            self.stop_.wait(self.every)
        self.sample()
        self.own_cpu = time.thread_time() - t0

    def begin(self) -> None:
        self.started_with = {p for p in os.listdir("/proc") if p.isdigit()}
        self.start()

    def end(self) -> float:
        self.stop_.set()
        self.join()
        return self.total()


def engine_idle_rate(seconds: float = 3.0) -> float:
    w = EngineWatch()
    w.begin()
    time.sleep(seconds)
    return w.end() / seconds


# ------------------------------------------------------------------ the containers' cgroups
def container_cpu(cid: str) -> float | None:
    """CPU seconds a container has used, from its cgroup (v1 cpuacct or v2 cpu.stat)."""
    for path, scale in ((f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage", 1e-9),
                        (f"/sys/fs/cgroup/cpu,cpuacct/docker/{cid}/cpuacct.usage", 1e-9)):
        try:
            with open(path) as f:
                return int(f.read()) * scale
        except OSError:
            pass
    for path in (f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat", f"/sys/fs/cgroup/docker/{cid}/cpu.stat"):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith("usage_usec"):
                        return int(line.split()[1]) * 1e-6
        except OSError:
            pass
    return None


class Containers:
    """Reads each sandbox container's cgroup once it is started (DockerSandbox.start: the server is
    up) and right before it is removed (DockerSandbox._remove)."""

    def __init__(self):
        self.cpu: dict[str, float] = {}
        self.at_start: dict[str, float] = {}
        self._remove, self._start = backend.DockerSandbox._remove, backend.DockerSandbox.start
        watch = self

        async def start(sandbox, *args, **kwargs):
            out = await watch._start(sandbox, *args, **kwargs)
            if sandbox.container_id:
                used = container_cpu(sandbox.container_id)
                if used is not None:
                    watch.at_start[sandbox.container_id] = used
            return out

        async def _remove(sandbox):
            if sandbox.container_id:
                used = container_cpu(sandbox.container_id)
                if used is not None:
                    watch.cpu[sandbox.container_id] = used
            await watch._remove(sandbox)

        backend.DockerSandbox._remove, backend.DockerSandbox.start = _remove, start

    def end(self) -> float:
        for cid in list(backend.LIVE):  # any not removed yet
            used = container_cpu(cid)
            if used is not None:
                self.cpu[cid] = used
        backend.DockerSandbox._remove, backend.DockerSandbox.start = self._remove, self._start
        return sum(self.cpu.values())

    def starting(self) -> float:
        """Of their CPU, what the containers used until they were started."""
        return sum(self.at_start.get(cid, 0.0) for cid in self.cpu)


class GCTime:
    """Seconds this process spent in Python's cyclic garbage collector (gc.callbacks), by generation."""

    def __init__(self):
        self.by_gen, self._t0 = [0.0, 0.0, 0.0], 0.0
        gc.callbacks.append(self._on)

    def _on(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.thread_time()
        else:
            self.by_gen[info["generation"]] += time.thread_time() - self._t0

    def close(self) -> list[float]:
        gc.callbacks.remove(self._on)
        return self.by_gen


def own_cpu() -> tuple[float, float]:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime


# ------------------------------------------------------------------ what runs
async def bench(a, work: Path) -> tuple[int, float | None]:
    from rich.console import Console

    from insandbox.bench.progress import RichBenchProgress
    from insandbox.bench.runner import run_bench

    with open(os.devnull, "w") as devnull, model_server(script(a.calls), a.latency, work) as srv:
        progress = RichBenchProgress(Console(file=devnull, force_terminal=True, width=160), label="cpu")
        try:
            result = await run_bench(bench_config(a.concurrency, a.samples, a.calls, work, srv.url), progress)
        finally:
            progress.close()
    errors = sum(1 for r in result.records if r.get("error"))
    if errors:
        print(f"  {errors} samples had errors")
    pooled = result.summary["session"].get("sandbox_pool") or {}
    print(f"  pool: {pooled.get('started')} started, {pooled.get('recycled')} recycled, "
          f"{pooled.get('recycle_failures')} recycle failures, {pooled.get('start_failures')} start failures")
    return sum(r["tool_calls"] for r in result.records), srv


async def run(a, work: Path) -> tuple[int, object]:
    from insandbox.config import RunConfig
    from insandbox.runs.session import arun

    calls = 0
    with model_server(script(a.calls), a.latency, work) as srv:
        for i in range(a.samples):
            result = await arun(f"CPU probe {i}.", RunConfig(model="scripted", base_url=srv.url,
                                                              max_steps=a.calls + 5, output_dir=work / f"run-{i}"))
            calls += result.trajectory.totals.tool_calls
    return calls, srv


async def rl(a, work: Path, tokenizer) -> tuple[int, None]:
    from bench_rollouts import call, reward, rows

    from insandbox.rl.rollout import RolloutConfig, Rollouts
    from insandbox.rl.rollout.backends.scripted import ScriptedGenerator

    r = Rollouts(tokenizer, RolloutConfig(max_steps=a.calls + 1, image=a.image), reward_fn=reward)
    turns = [call("execute_bash", command=f"echo step {i}") for i in range(a.calls - 2)]
    turns += [call("execute_bash", command="echo C > /testbed/answer.txt"), call("submit")]
    gen = ScriptedGenerator(r.chat, [{"turns": turns}], latency=a.latency)
    records = await r.run_groups(rows(a.samples), gen, n=1, concurrency=a.concurrency)
    bad = [x.exit_reason for x in records if x.reward != 1.0]
    if bad:
        print(f"  {len(bad)} rollouts without the answer: {bad[:5]}")
    return sum(x.tool_calls for x in records), None


async def start_for_calls(a) -> list:
    from insandbox.sandbox.base import SandboxSpec

    sandboxes = [backend.DockerSandbox(SandboxSpec(image=a.image)) for _ in range(a.concurrency)]
    await asyncio.gather(*(sb.start() for sb in sandboxes))
    await asyncio.gather(*(sb.run("echo warm") for sb in sandboxes))
    return sandboxes


async def echo_calls(a, sandboxes: list) -> tuple[int, None]:
    n = max(a.samples * a.calls // len(sandboxes), 1)

    async def one(sb) -> None:
        for i in range(n):
            await sb.run(f"echo step {i}")

    await asyncio.gather(*(one(sb) for sb in sandboxes))
    return n * len(sandboxes), None


async def measure(a, tokenizer) -> tuple[int, float, dict]:
    """One workload of `a.samples` samples: (tool calls, wall seconds, CPU seconds by component)."""
    sandboxes = await start_for_calls(a) if a.what == "calls" else []  # started before the clocks
    idle = engine_idle_rate()
    with tempfile.TemporaryDirectory(prefix="insandbox-cpu-") as tmp:
        containers, engine = Containers(), EngineWatch()
        ran_before = [container_cpu(sb.container_id) or 0.0 for sb in sandboxes]
        engine.begin()
        gc_time = GCTime()
        self0, children0 = own_cpu()
        t0 = time.perf_counter()
        if a.what == "calls":
            calls, srv = await echo_calls(a, sandboxes)
        elif a.what == "bench":
            calls, srv = await bench(a, Path(tmp))
        elif a.what == "run":
            calls, srv = await run(a, Path(tmp))
        else:
            calls, srv = await rl(a, Path(tmp), tokenizer)
        wall = time.perf_counter() - t0
        self1, children1 = own_cpu()
        gc_s = gc_time.close()
        engine_s = engine.end()
        if sandboxes:  # their CPU before the calls is taken off as "starting"
            containers.at_start = {sb.container_id: before for sb, before in zip(sandboxes, ran_before)}
            await asyncio.gather(*(sb.close() for sb in sandboxes))
        container_s = containers.end()
    model_s = srv.cpu_s if srv is not None else None
    ours = (self1 - self0 - engine.own_cpu) + (children1 - children0 - (model_s or 0.0))
    cpu = {"insandbox": ours, "  of it GC": sum(gc_s), "model server": model_s, "containers": container_s,
           "  starting": containers.starting(), "  after": container_s - containers.starting(),
           "engine": engine_s, **{f"  {k}": v for k, v in sorted(engine.by_process().items())},
           "engine - idle": max(0.0, engine_s - idle * wall), "(reaped by it)": engine.reaped()}
    cpu["total"] = ours + (model_s or 0.0) + container_s + cpu["engine - idle"]  # "(reaped by it)" left out
    if a.what == "calls":  # the starts were before the clocks
        cpu["total"] -= containers.starting()
    print(f"\n{a.what}: {a.samples} samples, concurrency {a.concurrency}, {a.calls} calls each, model latency "
          f"{a.latency:g} s; {calls} tool calls in {wall:.1f} s ({len(containers.cpu)} containers; engine idle "
          f"{idle * 1e3:.0f} ms/s)")
    return calls, wall, cpu


def table(columns: list[tuple[str, dict, int]]) -> None:
    """CPU seconds and ms per tool call, one pair of columns per workload (or difference)."""
    print(f"\n{'component':<14}" + "".join(f" {name + ' CPU s':>18} {'ms/call':>8}" for name, _, _ in columns))
    for key in columns[0][1]:
        cells = ""
        for _, cpu, calls in columns:
            v = cpu[key]
            cells += f" {v:>18.2f} {v / calls * 1e3:>8.2f}" if v is not None else f" {'-':>18} {'-':>8}"
        print(f"{key:<14}{cells}")


async def main(a) -> None:
    from insandbox.config import RunConfig
    from insandbox.runs.session import prepare_sandbox

    await prepare_sandbox(RunConfig(image=a.image))
    tokenizer = None
    if a.what == "rl":
        from insandbox.models.local_server import default_gguf
        from insandbox.rl.rollout.backends import load_gguf_tokenizer

        tokenizer = load_gguf_tokenizer(default_gguf())
    calls, _, cpu = await measure(a, tokenizer)
    if not a.steady:
        table([("", cpu, calls)])
        return
    # steady state: the same workload with `steady` times the samples, less the first one: what the
    # extra calls cost, without what every workload pays once (imports, the pool's first starts)
    small = a.samples
    a.samples = small * a.steady
    calls2, _, cpu2 = await measure(a, tokenizer)
    extra = {k: (cpu2[k] - cpu[k]) if cpu[k] is not None else None for k in cpu}
    table([(f"{small}", cpu, calls), (f"{a.samples}", cpu2, calls2), (f"{a.samples}-{small}", extra, calls2 - calls)])


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", choices=("bench", "run", "rl", "calls"), default="bench")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--samples", type=int, default=192)
    ap.add_argument("--calls", type=int, default=10, help="tool calls per sample (at least 2)")
    ap.add_argument("--latency", type=float, default=1.0, help="seconds the scripted model takes per call")
    ap.add_argument("--image", default="insandbox:latest")
    ap.add_argument("--steady", type=int, default=0, metavar="K",
                    help="run again with K times the samples and show the difference: the steady state's CPU "
                         "per tool call, without what a workload pays once (imports, the pool's first starts)")
    asyncio.run(main(ap.parse_args()))
