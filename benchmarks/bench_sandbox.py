"""Latency of the sandbox operations the loop uses, printed as a table.

    .venv/bin/python benchmarks/bench_sandbox.py [--rounds 200]

Measures, on a real container of the project image: start and removal, a command
round trip (`true`) through the Sandbox API and through the execute_bash tool, the
editor's operations, file transfers through the archive API, a 20 MB output, and
copying an output folder back.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from insandbox.sandbox import SandboxSpec, create_sandbox
from insandbox.tools import ToolBox, ToolCall, default_tools


def pct(values: list[float], p: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round((len(v) - 1) * p / 100)))]


async def timed(n: int, fn) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - t)
    return out


async def main(rounds: int, image: str) -> None:
    rows: list[tuple[str, int, list[float]]] = []
    starts, closes = [], []
    for _ in range(10):
        sb = create_sandbox(SandboxSpec(image=image, run_id="bench"))
        t = time.perf_counter()
        await sb.start()
        starts.append(time.perf_counter() - t)
        t = time.perf_counter()
        await sb.close()
        closes.append(time.perf_counter() - t)
    rows += [("sandbox start (create, attach, start, server ready)", 10, starts),
             ("sandbox removal (rm -f)", 10, closes)]

    sb = create_sandbox(SandboxSpec(image=image, run_id="bench"))
    await sb.start()
    box = ToolBox(default_tools())
    try:
        rows.append(("Sandbox.run('true')", rounds, await timed(rounds, lambda: sb.run("true"))))
        call = ToolCall("c", "execute_bash", json.dumps({"command": "true"}))
        rows.append(("execute_bash `true` (tool: parse, run, render)", rounds,
                     await timed(rounds, lambda: box.call(sb, call))))
        rows.append(("execute_bash `cd /tmp && export X=1`", rounds,
                     await timed(rounds, lambda: sb.run("cd /tmp && export X=1"))))
        await sb.write_file("/testbed/e.py", b"".join(b"line %d\n" % i for i in range(200)))
        for label, args in (("editor view (200-line file)", {"command": "view", "path": "/testbed/e.py"}),
                            ("editor create (1 KB)", {"command": "create", "path": "/testbed/c.txt",
                                                      "file_text": "x" * 1024}),
                            ("editor str_replace", {"command": "str_replace", "path": "/testbed/e.py",
                                                    "old_str": "line 100\n", "new_str": "line 100\n"}),
                            ("editor view (directory)", {"command": "view", "path": "/testbed"})):
            c = ToolCall("c", "str_replace_editor", json.dumps(args))
            rows.append((label, 30, await timed(30, lambda c=c: box.call(sb, c))))
        for size, label in ((1024, "1 KB"), (300 * 1024, "300 KB"), (5 * 1024 * 1024, "5 MB")):
            data = bytes(range(256)) * (size // 256)
            how = "server" if size <= sb.spec.fast_file_max_bytes else "archive API"
            rows.append((f"write_file {label} ({how})", 10,
                         await timed(10, lambda d=data: sb.write_file("/testbed/f.bin", d))))
            rows.append((f"read_file {label} ({how})", 10, await timed(10, lambda: sb.read_file("/testbed/f.bin"))))
        big = "python3 -c \"import sys; sys.stdout.write('x' * 20_000_000 + '\\n')\""
        rows.append(("command printing one 20 MB line (clipped to 16 K chars)", 3, await timed(3, lambda: sb.run(big))))
        await sb.run("mkdir -p /testbed/output/d && for i in $(seq 100); do echo $i > /testbed/output/d/$i.txt; done")
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(("copy_out of 100 files", 5,
                         await timed(5, lambda: sb.copy_out("/testbed/output", Path(tmp)))))
        await sb.run("rm -rf /testbed/output/d && mkdir -p /testbed/output/d && cd /testbed/output/d && "
                     "for i in $(seq 1000); do echo $i > $i.txt; done")
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(("copy_out of 1,000 files", 5,
                         await timed(5, lambda: sb.copy_out("/testbed/output", Path(tmp)))))
        await sb.run("rm -rf /testbed/output/d && truncate -s 2G /testbed/output/sparse.bin && "
                     "echo hi > /testbed/output/normal.txt")
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(("copy_out: normal.txt beside a 2 GB sparse file (skipped)", 5,
                         await timed(5, lambda: sb.copy_out("/testbed/output", Path(tmp)))))
    finally:
        await sb.close()

    width = max(len(r[0]) for r in rows)
    print(f"{'operation':<{width}}  {'n':>4}  {'p50 ms':>8}  {'p95 ms':>8}  {'mean ms':>8}")
    print("-" * (width + 36))
    for label, n, vals in rows:
        print(f"{label:<{width}}  {n:>4}  {pct(vals, 50) * 1e3:>8.2f}  {pct(vals, 95) * 1e3:>8.2f}  "
              f"{statistics.mean(vals) * 1e3:>8.2f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--image", default="insandbox:latest")
    a = ap.parse_args()
    asyncio.run(main(a.rounds, a.image))
