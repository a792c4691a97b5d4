"""Fork latency: snapshot a live sandbox and start N copies of it, printed as a table.

    flock /tmp/insandbox-heavy.lock .venv/bin/python benchmarks/bench_fork.py [--rounds 3] [--copies 1,4,8]

For a sandbox holding nearly nothing and one holding 100 MB of changes (100 files of 1 MB written
by the model's shell), two ways of giving copies the sandbox's files:

- commit (what insandbox does, sandbox/snapshot.py): the shell's state is saved, the container
  committed (paused) to a temporary image, and the copies are sandboxes of that image, started
  together, each restoring the shell's state. Measured end to end through the real code.
- host copy (the alternative): pause the container and copy its overlay upper folder on the host
  to a staging folder (the snapshot), then copy the staging folder into each copy's upper folder
  before it starts. Measured as what it costs: the pause + `cp -a` to staging, then N times the
  `cp -a` of the staging folder, plus N plain sandboxes started together.

Medians over the rounds; "N ready" is from the snapshot's end until all N copies answer.
"""
from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from insandbox.sandbox import SandboxSpec, create_sandbox
from insandbox.sandbox.docker import engine

FILL_100MB = "mkdir -p /testbed/data && for i in $(seq 100); do head -c 1048576 /dev/urandom > /testbed/data/f$i; done"
FILL_EMPTY = "echo hello > /testbed/note.txt"


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def source_sandbox(image: str, fill: str):
    sb = create_sandbox(SandboxSpec(image=image, run_id="bench-fork"))
    await sb.start()
    res = await sb.run(f"cd /testbed && export STAGE=forked && {fill}", timeout=300)
    assert res.exit_code == 0, res.output
    return sb


async def commit_round(image: str, fill: str, n: int) -> tuple[float, float]:
    source = await source_sandbox(image, fill)
    try:
        t0 = time.perf_counter()
        snap = await source.snapshot()
        t1 = time.perf_counter()
        copies = await snap.start_copies(n)
        t2 = time.perf_counter()
        try:
            for c in copies:  # each copy is what it should be
                out = (await c.run("echo $STAGE $PWD; ls /testbed/data 2>/dev/null | wc -l")).output.split()
                assert out[:2] == ["forked", "/testbed"], out
        finally:
            await asyncio.gather(*(c.close() for c in copies))
            await snap.remove()
        return t1 - t0, t2 - t1
    finally:
        await source.close()


def upper_dir(container_id: str) -> Path:
    info = engine.api().inspect_container(container_id)
    return Path(info["GraphDriver"]["Data"]["UpperDir"])


async def host_copy_round(image: str, fill: str) -> tuple[float, float]:
    """(snapshot: pause + cp -a of the upper folder to staging, one copy's cp -a from staging)."""
    source = await source_sandbox(image, fill)
    api = engine.api()
    upper = upper_dir(source.container_id)
    scratch = Path(tempfile.mkdtemp(prefix=".insandbox-bench-fork-", dir=upper.parent.parent))
    try:
        t0 = time.perf_counter()
        api.pause(source.container_id)
        try:
            subprocess.run(["cp", "-a", f"{upper}/.", str(scratch / "staging")], check=True)
        finally:
            api.unpause(source.container_id)
        t1 = time.perf_counter()
        subprocess.run(["cp", "-a", f"{scratch / 'staging'}/.", str(scratch / "copy")], check=True)
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        await source.close()


async def plain_starts(image: str, n: int) -> float:
    """Seconds until n sandboxes of the image, started together, all answer."""
    boxes = [create_sandbox(SandboxSpec(image=image, run_id="bench-fork")) for _ in range(n)]
    t = time.perf_counter()
    await asyncio.gather(*(sb.start() for sb in boxes))
    took = time.perf_counter() - t
    await asyncio.gather(*(sb.close() for sb in boxes))
    return took


async def main(rounds: int, copies: list[int], image: str) -> None:
    starts = {n: med([await plain_starts(image, n) for _ in range(rounds)]) for n in copies}
    rows = []
    for label, fill in (("near-empty", FILL_EMPTY), ("100 MB", FILL_100MB)):
        for n in copies:
            snaps, ready = [], []
            for _ in range(rounds):
                s, r = await commit_round(image, fill, n)
                snaps.append(s)
                ready.append(r)
            rows.append((label, "commit", n, med(snaps), med(ready)))
        snaps, per = [], []
        for _ in range(rounds):
            s, c = await host_copy_round(image, fill)
            snaps.append(s)
            per.append(c)
        for n in copies:  # the copies' cp's share one disk: one after the other, then the starts together
            rows.append((label, "host copy", n, med(snaps), n * med(per) + starts[n]))
    print("plain sandboxes started together, until all answer: "
          + ", ".join(f"{n}: {t * 1000:.0f} ms" for n, t in starts.items()))
    print(f"{'changes':<11} {'method':<10} {'N':>3} {'snapshot':>10} {'N ready':>10} {'per copy':>10} "
          f"{'snapshot + N ready':>19}")
    for label, method, n, s, r in rows:
        print(f"{label:<11} {method:<10} {n:>3} {s * 1000:>8.0f}ms {r * 1000:>8.0f}ms {r / n * 1000:>8.0f}ms "
              f"{(s + r) * 1000:>17.0f}ms")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--copies", default="1,4,8", help="comma-separated numbers of copies")
    ap.add_argument("--image", default="insandbox:latest")
    a = ap.parse_args()
    asyncio.run(main(a.rounds, [int(x) for x in a.copies.split(",")], a.image))
