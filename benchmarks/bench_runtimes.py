"""What each sandbox runtime costs: start (create to ready), a command round trip, removal.

    .venv/bin/python benchmarks/bench_runtimes.py [--rounds 20] [--user NAME] [--only TEXT]

Rows: runc as insandbox runs it by default (capabilities dropped, no-new-privileges, a 10 GB disk
of its own, the default bridge with the sandbox's own packet filter), the same without the disk
limit, with `--network none` and with `--network registries`, gVisor (`runsc`) when the engine has it, the
user-namespaced engine of scripts/userns_engine.sh when it runs, and the bwrap backend (no engine:
DOCKER_HOST points at nothing; the image's files exported once first) in its network modes, also as
the unprivileged user NAME with --user (from a tar of the image's files it can read). Each row runs in
its own process (the engine connection is per process). Rows that cannot run say why.
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


async def measure(rounds: int, image: str, runtime: str, disk: str, network: str, backend: str = "docker") -> dict:
    from insandbox.sandbox import SandboxLimits, SandboxSpec, backend_class, create_sandbox

    limits = SandboxLimits(runtime=runtime or None, disk=disk or None, network=network)
    await backend_class(backend).prepare(SandboxSpec(image=image, limits=limits))  # once, as a run does
    starts, execs, closes = [], [], []
    for _ in range(rounds):
        sb = create_sandbox(SandboxSpec(image=image, limits=limits), backend)
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
        docker_host: str = "", backend: str = "docker", user: str = "", env: dict | None = None) -> tuple[str, str]:
    argv = [sys.executable, __file__, "--one", json.dumps([rounds, image, runtime, disk, network, backend])]
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    path = os.pathsep.join(filter(None, (src, os.environ.get("PYTHONPATH"))))
    env = {**os.environ, "PYTHONPATH": path, **(env or {})}
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    if user:  # a clean environment, as a job of that user's would have
        python, path = python_for(user)
        keep = {k: v for k, v in env.items() if k.startswith(("INSANDBOX_", "DOCKER_HOST"))}
        argv = ["runuser", "-u", user, "--", "env", "-i", f"HOME={os.path.expanduser('~' + user)}",
                "PATH=/usr/local/bin:/usr/bin:/bin", f"PYTHONPATH={path}", *(f"{k}={v}" for k, v in keep.items()),
                python, *argv[1:]]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, cwd="/tmp")
    if p.returncode != 0:
        return label, "failed: " + (p.stderr.strip().splitlines() or ["?"])[-1][:100]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return label, f"{r['start'] * 1000:8.0f} ms {r['exec'] * 1000:8.2f} ms {r['close'] * 1000:8.0f} ms"


def python_for(user: str) -> tuple[str, str]:
    """An interpreter the user may run and the PYTHONPATH that finds this checkout and its packages."""
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    if subprocess.run(["runuser", "-u", user, "--", sys.executable, "-c", "pass"], capture_output=True).returncode == 0:
        return sys.executable, src
    site = next(p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p))
    return f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}", f"{src}:{site}"


def bwrap_rows(a: argparse.Namespace) -> list[tuple[str, str]]:
    """The bwrap backend with no engine: the image's files exported here once (as root), or, for --user,
    a tar of them the user unpacks once into a cache of its own."""
    from pathlib import Path

    from insandbox.sandbox import backend_class
    from insandbox.sandbox.bwrap import find_rootfs

    find_rootfs(a.image)  # the export, before the clock starts and before the engine is taken away
    no_engine = "unix:///nonexistent/docker.sock"
    rows = [row(f"bwrap, --network {net}", a.rounds, a.image, network=net, backend="bwrap", docker_host=no_engine)
            for net in ("none", "bridge", "host")]
    if a.user:
        docker = backend_class("docker")
        tar = Path("/var/tmp/insandbox-test-rootfs") / (docker.image_id(a.image).split(":")[-1][:16] + ".tar")
        if not tar.is_file():
            tar.parent.mkdir(parents=True, exist_ok=True)
            docker.export_root_filesystem(a.image, tar)
        os.chmod(tar.parent, 0o755)
        os.chmod(tar, 0o644)
        env = {"INSANDBOX_ROOTFS": str(tar)}
        for net in ("none", "bridge"):
            rows.append(row(f"bwrap, --network {net}, as {a.user} (unprivileged)", a.rounds, a.image, network=net,
                            backend="bwrap", docker_host=no_engine, user=a.user, env=env))
    return rows


def engine_has(runtime: str) -> bool:
    out = subprocess.run(["docker", "info", "--format", "{{json .Runtimes}}"], capture_output=True, text=True).stdout
    return runtime in (json.loads(out or "{}") or {})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--image", default="insandbox:latest")
    ap.add_argument("--user", default="", help="also run the bwrap rows as this unprivileged user")
    ap.add_argument("--only", default="", help="only the rows whose label holds this text (docker, bwrap, ...)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(asyncio.run(measure(*json.loads(a.one)))))
        return
    if a.only == "bwrap":
        return show(bwrap_rows(a))
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
    if a.only != "docker":
        rows += bwrap_rows(a)
    show(rows)


def show(rows: list[tuple[str, str]]) -> None:
    print(f"{'runtime':62} {'start p50':>11} {'exec p50':>11} {'close p50':>11}")
    for label, text in rows:
        print(f"{label:62} {text}")


if __name__ == "__main__":
    main()
