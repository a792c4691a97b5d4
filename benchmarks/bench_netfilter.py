"""What a sandbox's packet filter costs at start (docker/netfilter.py), printed as one line.

    .venv/bin/python benchmarks/bench_netfilter.py [--starts 10] [--loads 30] [--network bridge]

On the real engine: `--starts` sandboxes started one after another (create to ready, the rules loaded
on the way), then the rules loaded `--loads` more times into the last one's namespace (nsenter and
iptables-restore, IPv4 and IPv6), medians in milliseconds. Run it from two checkouts (PYTHONPATH) to
compare two versions of the rules on one machine.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from insandbox.sandbox import SandboxLimits, SandboxSpec, create_sandbox
from insandbox.sandbox.docker import engine, netfilter


async def main(starts: int, loads: int, network: str, image: str) -> None:
    started: list[float] = []
    sb = None
    for n in range(starts):
        sb = create_sandbox(SandboxSpec(image=image, run_id="bench", limits=SandboxLimits(network=network)))
        t = time.perf_counter()
        await sb.start()
        started.append(time.perf_counter() - t)
        if n < starts - 1:
            await sb.close()
    try:
        where = netfilter.placement(engine.api().inspect_container(sb.container_id))
        rules = netfilter.bridge_rules(where) if network == "bridge" else None
        loaded: list[float] = []
        for _ in range(loads if rules else 0):
            t = time.perf_counter()
            netfilter.apply(where, rules)
            loaded.append(time.perf_counter() - t)
    finally:
        await sb.close()
    print(f"{network}: sandbox start p50 {statistics.median(started) * 1000:.0f} ms "
          f"(min {min(started) * 1000:.0f}, {starts} starts); rules loaded p50 "
          f"{statistics.median(loaded) * 1000:.1f} ms (min {min(loaded) * 1000:.1f}, {loads} loads)"
          if loaded else f"{network}: sandbox start p50 {statistics.median(started) * 1000:.0f} ms")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=10)
    ap.add_argument("--loads", type=int, default=30)
    ap.add_argument("--network", default="bridge")
    ap.add_argument("--image", default="insandbox:latest")
    args = ap.parse_args()
    asyncio.run(main(args.starts, args.loads, args.network, args.image))
