"""What `--network registries` costs, printed as a table.

    .venv/bin/python benchmarks/bench_network.py [--rounds 3] [--apt] [--no-build]

Measures, on the real engine: building the proxy's image with no layer cache (first use on a
machine that has the sandbox image's Debian base), making the proxy's two networks, starting a
proxy container until it answers, a sandbox's start, and `pip install` of a tiny package and of
one with dependencies (into a fresh folder, no pip cache) in bridge mode and through the proxy
(`--apt`: `apt-get update` too). Downloads reach PyPI and Debian over this machine's network, so
their figures move with it: compare the two modes within one run.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from insandbox.sandbox import SandboxLimits, SandboxSpec, create_sandbox
from insandbox.sandbox.docker import engine, proxy

INSTALLS = {
    "pip install six (1 wheel, 11 kB)": "pip install -q --no-cache-dir --no-deps --target /tmp/t{n} six",
    "pip install requests (5 wheels, 0.5 MB)": "pip install -q --no-cache-dir --target /tmp/t{n} requests",
}
APT = {"apt-get update (bookworm main, 9 MB)": "rm -rf /var/lib/apt/lists/* && apt-get update -qq"}


def timed_sync(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def build_cost() -> float:
    tag = "insandbox-proxy:bench"
    try:
        return timed_sync(lambda: proxy.build_image(tag, no_cache=True))
    finally:
        engine.api().remove_image(tag, force=True)


def network_cost() -> float:
    api = engine.api()

    def make() -> None:
        for name, internal in (("insandbox-bench-internal", True), ("insandbox-bench-egress", False)):
            api.create_network(name, driver="bridge", internal=internal, labels={"insandbox.bench": "1"},
                               options={"com.docker.network.bridge.inhibit_ipv4": "true"} if internal else None)

    try:
        return timed_sync(make)
    finally:
        for n in api.networks(filters={"label": "insandbox.bench=1"}):
            api.remove_network(n["Id"])


def proxy_start_cost() -> float:
    """A second proxy (one more allowed host: another configuration) on the existing networks."""
    endpoints = [*proxy.allowed_endpoints(), proxy.Endpoint("https", "bench.invalid", 443)]
    proxy.ensure()  # the networks exist
    seconds = 0.0
    try:
        seconds = timed_sync(lambda: proxy.ensure(endpoints=endpoints))
    finally:
        for c in engine.api().containers(all=True, filters={"label": proxy.LABEL_PROXY}):
            if "bench.invalid" in (c.get("Labels") or {}).get(proxy.LABEL_ALLOWED, ""):
                engine.api().remove_container(c["Id"], force=True)
        proxy.forget()
    return seconds


async def mode_costs(network: str, rounds: int, commands: dict[str, str], image: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"sandbox start": []}
    for _ in range(rounds):
        sb = create_sandbox(SandboxSpec(image=image, run_id="bench", limits=SandboxLimits(network=network)))
        t = time.perf_counter()
        await sb.start()
        out["sandbox start"].append(time.perf_counter() - t)
        await sb.close()
    sb = create_sandbox(SandboxSpec(image=image, run_id="bench", limits=SandboxLimits(network=network)))
    await sb.start()
    try:
        for n in range(rounds):
            for label, cmd in commands.items():
                t = time.perf_counter()
                res = await sb.run(cmd.format(n=n), timeout=600)
                if res.exit_code != 0:
                    raise SystemExit(f"{network}: {cmd!r} failed:\n{res.output}")
                out.setdefault(label, []).append(time.perf_counter() - t)
    finally:
        await sb.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--apt", action="store_true", help="also time apt-get update")
    ap.add_argument("--no-build", action="store_true", help="skip the image build (about a minute)")
    ap.add_argument("--image", default="insandbox:latest")
    args = ap.parse_args()

    once = []
    if not args.no_build:
        once.append(("proxy image build, no cache (first use)", build_cost()))
    once.append(("the proxy's two networks made", network_cost()))
    once.append(("proxy container made and answering", proxy_start_cost()))
    print(f"{'one-off cost':<48} {'seconds':>8}")
    for label, s in once:
        print(f"{label:<48} {s:>8.2f}")

    commands = {**INSTALLS, **(APT if args.apt else {})}
    bridge = asyncio.run(mode_costs("bridge", args.rounds, commands, args.image))
    registries = asyncio.run(mode_costs("registries", args.rounds, commands, args.image))
    print(f"\n{'p50 of ' + str(args.rounds):<48} {'bridge':>8} {'registries':>11} {'ratio':>6}")
    for label in bridge:
        b, r = statistics.median(bridge[label]), statistics.median(registries[label])
        print(f"{label:<48} {b:>7.2f}s {r:>10.2f}s {r / b:>6.2f}")


if __name__ == "__main__":
    main()
