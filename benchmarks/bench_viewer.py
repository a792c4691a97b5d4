"""How fast `insandbox view` answers over big folders: the runs list over N synthetic runs, a 1,000-step
run (its first page and a later one), a folder of 100,000 files (its first page).

Each figure is the median of a few requests over real HTTP to the viewer served by uvicorn in this
process: "cold" is the first request after start (the index is built, the trajectory parsed, the folder
listed), "rescan" a request after the index's once-a-second throttle has passed (every folder is
stat'ed again, nothing unchanged is read), "cached" a request within that second.

    python benchmarks/bench_viewer.py [--runs 1000,10000] [--files 100000] [--keep DIR]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from insandbox.viewer.app import bind, server  # noqa: E402
from insandbox.viewer.index import folder_id  # noqa: E402
from tests.viewer.synthetic import write_files, write_run  # noqa: E402


def serve(root: Path):
    sock = bind("127.0.0.1", 0)
    srv = server(root, sock)
    t = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    t.start()
    while not srv.started:
        time.sleep(0.01)
    return srv, t, f"http://127.0.0.1:{sock.getsockname()[1]}"


def get(url: str, htmx: bool = False) -> tuple[float, int]:
    req = urllib.request.Request(url, headers={"HX-Request": "true"} if htmx else {})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req) as r:
        body = r.read()
    return time.perf_counter() - t0, len(body)


def measure(base: str, path: str, htmx: bool = False, repeats: int = 5) -> dict:
    cold, size = get(base + path, htmx)
    time.sleep(1.1)
    rescan = statistics.median(get(base + path, htmx)[0] for _ in range(1))
    cached = statistics.median(get(base + path, htmx)[0] for _ in range(repeats))
    return {"cold": cold, "rescan": rescan, "cached": cached, "bytes": size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="1000,10000")
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--keep", type=Path, help="build the folders here and keep them")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-viewer-"))
    rows = []
    try:
        for n in [int(x) for x in args.runs.split(",")]:
            root = work / f"runs-{n}"
            t0 = time.time()
            if not root.is_dir():
                for i in range(n):
                    write_run(root / f"run-{i:06d}", steps=3, task_id=f"item-{i}")
            made = time.time() - t0
            srv, t, base = serve(root)
            m = measure(base, "/")
            rows.append((f"runs list, {n:,} runs (first 100 rows)", m))
            srv.should_exit = True
            t.join(5)
            print(f"  ({n:,} runs written in {made:.1f} s)", file=sys.stderr)
        root = work / "big"
        if not root.is_dir():
            write_run(root / "run", steps=1000, output_chars=2000)
            write_files(root / "run" / "files", args.files)
        srv, t, base = serve(root)
        rid = folder_id("run")
        size = (root / "run" / "trajectory.json").stat().st_size
        rows.append((f"run of 1,000 steps ({size / 1e6:.1f} MB), page 1", measure(base, f"/r/{rid}")))
        rows.append(("run of 1,000 steps, steps 901-950", measure(base, f"/r/{rid}/steps?start=900&n=50", True)))
        rows.append((f"files listing of {args.files:,} files, page 1", measure(base, f"/r/{rid}/files?dir=files",
                                                                               True)))
        rows.append((f"files listing of {args.files:,} files, filtered",
                     measure(base, f"/r/{rid}/files?dir=files&q=f0999", True)))
        srv.should_exit = True
        t.join(5)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{'request':<52} {'cold':>9} {'rescan':>9} {'cached':>9} {'bytes':>9}")
    for name, m in rows:
        print(f"{name:<52} {m['cold'] * 1000:>7.0f}ms {m['rescan'] * 1000:>7.0f}ms {m['cached'] * 1000:>7.1f}ms "
              f"{m['bytes']:>9,}")


if __name__ == "__main__":
    main()
