"""What each sandbox runtime costs: start (create to ready), a command round trip, removal.

    .venv/bin/python benchmarks/bench_runtimes.py [--rounds 20]

Rows: runc as insandbox runs it by default (capabilities dropped, no-new-privileges, a 10 GB disk
of its own, the default bridge with the sandbox's own packet filter), the same without the disk
limit, with `--network none` and with `--network registries`, gVisor (`runsc`) when the engine has it, and the
user-namespaced engine of scripts/userns_engine.sh when it runs. Each row runs in its own process
(the engine connection is per process). Rows that cannot run say why.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

USERNS_SOCKET = "unix:///run/insandbox-userns/docker.sock"


async def measure(rounds: int, image: str, runtime: str, disk: str, network: str) -> dict:
    from insandbox.sandbox import SandboxLimits, SandboxSpec, create_sandbox

    limits = SandboxLimits(runtime=runtime or None, disk=disk or None, network=network)
    starts, execs, closes = [], [], []
    for _ in range(rounds):
        sb = create_sandbox(SandboxSpec(image=image, limits=limits))
        t = time.perf_counter()
        await sb.start()
        starts.append(time.perf_counter() - t)
        for _ in range(20):
            t = time.perf_counter()
            await sb.run("true")
            execs.append(time.perf_counter() - t)
        t = time.perf_counter()
        await sb.close()
        closes.append(time.perf_counter() - t)
    return {"start": statistics.median(starts), "exec": statistics.median(execs), "close": statistics.median(closes)}


def row(label: str, rounds: int, image: str, runtime: str = "", disk: str = "10g", network: str = "bridge",
        docker_host: str = "") -> tuple[str, str]:
    env = dict(os.environ)
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    p = subprocess.run([sys.executable, __file__, "--one", json.dumps([rounds, image, runtime, disk, network])],
                       env=env, capture_output=True, text=True)
    if p.returncode != 0:
        return label, "failed: " + (p.stderr.strip().splitlines() or ["?"])[-1][:100]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return label, f"{r['start'] * 1000:8.0f} ms {r['exec'] * 1000:8.2f} ms {r['close'] * 1000:8.0f} ms"


def engine_has(runtime: str) -> bool:
    out = subprocess.run(["docker", "info", "--format", "{{json .Runtimes}}"], capture_output=True, text=True).stdout
    return runtime in (json.loads(out or "{}") or {})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--image", default="insandbox:latest")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(asyncio.run(measure(*json.loads(a.one)))))
        return
    rows = [row("runc, default limits (caps, no-new-privileges, 10 GB disk)", a.rounds, a.image),
            row("runc, no disk limit (--disk none)", a.rounds, a.image, disk=""),
            row("runc, --network none", a.rounds, a.image, network="none"),
            row("runc, --network registries", a.rounds, a.image, network="registries")]
    if engine_has("runsc"):
        rows.append(row("gVisor (--runtime gvisor)", a.rounds, a.image, runtime="gvisor"))
    else:
        rows.append(("gVisor (--runtime runsc)", "not installed in this engine"))
    userns = subprocess.run(["docker", "info"], env={**os.environ, "DOCKER_HOST": USERNS_SOCKET},
                            capture_output=True).returncode == 0
    if userns:
        rows.append(row("runc, user-namespaced engine (scripts/userns_engine.sh)", a.rounds, a.image,
                        docker_host=USERNS_SOCKET))
    else:
        rows.append(("user-namespaced engine", "not running: bash scripts/userns_engine.sh"))
    print(f"{'runtime':62} {'start p50':>11} {'exec p50':>11} {'close p50':>11}")
    for label, text in rows:
        print(f"{label:62} {text}")


if __name__ == "__main__":
    main()
