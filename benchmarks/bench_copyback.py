"""What a hostile output folder costs the host at copy-back, printed as a table.

    .venv/bin/python benchmarks/bench_copyback.py [--cases folders,long,mix] [--via server,archive]

Each case fills /testbed/output of a real Docker sandbox of the project image, then copies it back
with the default limits, in a process of its own (so peak memories do not mix):

- folders: 100,000 empty folders
- long: 30,000 entries with paths of ~3,700 characters (14 nested folders of 249-character names,
  then files of 206-character names in the deepest)
- mix: 40,000 names, in turn (in name order) a folder holding a folder, a symbolic link to a
  3,000-character target, a FIFO and a 100-byte file (50,000 entries)

`via server` lists the folder through the sandbox's server (the usual way); `via archive` first
closes the channel to the server, so the engine's archive stream is the way (as when the server
is gone). Columns: entries made on the host (folders and files), the bytes they take there (du),
the host process's peak resident memory during the copy (VmHWM, reset just before it) and how much
that is above its resident memory just before, the entries and JSON bytes of the skipped list as
trajectory.json would record it, and the copy's wall time.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MAKE = {
    "folders": "cd /testbed/output && seq -w 1 100000 | xargs mkdir",
    "long": """python3 - <<'EOF'
import os
d = "/testbed/output"
for i in range(14):
    d = os.path.join(d, "d%02d" % i + "x" * 246)
os.makedirs(d)
os.chdir(d)
for i in range(30000 - 14):
    open("f%05d" % i + "y" * 200, "w").close()
EOF""",
    "mix": """python3 - <<'EOF'
import os
os.chdir("/testbed/output")
target = "/" + "t" * 3000
for i in range(40000):
    name = "n%05d" % i
    if i % 4 == 0:
        os.makedirs(name + "/sub")
    elif i % 4 == 1:
        os.symlink(target, name)
    elif i % 4 == 2:
        os.mkfifo(name)
    else:
        with open(name, "w") as f:
            f.write("x" * 100)
EOF""",
}


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def on_host(folder: Path) -> tuple[int, int]:
    """(entries below folder, bytes they take on disk)."""
    entries = used = 0
    for top, dirs, files in os.walk(folder):
        for name in dirs + files:
            entries += 1
            used += os.lstat(os.path.join(top, name)).st_blocks * 512
    return entries, used


async def one_case(case: str, via: str, image: str) -> dict:
    from insandbox.sandbox import SandboxSpec, create_sandbox

    sb = create_sandbox(SandboxSpec(image=image, run_id="bench"))
    await sb.start()
    dest = Path(tempfile.mkdtemp(prefix="bench-copyback-"))
    try:
        r = await sb.run(MAKE[case], timeout=900)
        if r.exit_code != 0:
            raise SystemExit(f"making the {case} case failed: {r.output[-2000:]}")
        if via == "archive":
            await sb.channel.close()  # as if the server had died: the engine's archive stream it is
        gc.collect()
        Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from now
        before = status_kib("VmRSS")
        t = time.perf_counter()
        copied = await sb.copy_out("/testbed/output", dest / "out")
        wall = time.perf_counter() - t
        peak = status_kib("VmHWM")
        entries, used = on_host(dest / "out")
        skipped = [{"path": f"/testbed/output/{s.path}", "reason": s.reason, "size": s.size} for s in copied.skipped]
        return {"case": case, "via": via, "entries": entries, "bytes": used, "peak_kib": peak,
                "peak_over_kib": peak - before, "files": len(copied.files), "skipped": len(skipped),
                "skipped_bytes": len(json.dumps(skipped)), "wall_s": wall}
    finally:
        shutil.rmtree(dest, ignore_errors=True)
        await sb.close()


def mib(n: float) -> str:
    return f"{n / 1024 ** 2:,.1f} MiB"


def kib(n: float) -> str:
    return f"{n / 1024:,.1f} KiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="folders,long,mix")
    ap.add_argument("--via", default="server,archive")
    ap.add_argument("--image", default="insandbox:latest")
    ap.add_argument("--one", nargs=2, metavar=("CASE", "VIA"), help=argparse.SUPPRESS)  # a child's own case
    args = ap.parse_args()
    if args.one:
        print(json.dumps(asyncio.run(one_case(*args.one, args.image))))
        return
    rows = []
    for case in args.cases.split(","):
        for via in args.via.split(","):
            out = subprocess.run([sys.executable, __file__, "--image", args.image, "--one", case, via],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"{case} via {via} failed:\n{out.stderr[-3000:]}")
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    head = ("case", "via", "entries on host", "bytes on host", "peak RSS", "peak - before", "files",
            "skipped", "skipped JSON", "wall")
    table = [head] + [(r["case"], r["via"], f"{r['entries']:,}", mib(r["bytes"]), mib(r["peak_kib"] * 1024),
                       mib(r["peak_over_kib"] * 1024), f"{r['files']:,}", f"{r['skipped']:,}",
                       kib(r["skipped_bytes"]), f"{r['wall_s']:.1f} s") for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for i, row in enumerate(table):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


if __name__ == "__main__":
    main()
