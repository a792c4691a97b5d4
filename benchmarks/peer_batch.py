"""Batch driver for ../shared/peer's concurrency scenario: N runs in one process.

insandbox runs are asyncio tasks, so one process drives all of them; `--workers` caps
how many are in flight. Writes the harness's driver.json (per-task timings, errors).

    python benchmarks/peer_batch.py --n 32 --workers 32 --model M --base-url URL --image insandbox:latest \
        --max-steps 30 --out DIR/driver.json
"""
import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from insandbox import arun


async def main(a: argparse.Namespace) -> None:
    gate = asyncio.Semaphore(a.workers)
    root = Path(tempfile.mkdtemp(prefix="peer-batch-", dir=Path(a.out).parent))

    async def one(i: int) -> dict:
        async with gate:
            rec = {"i": i, "t0": time.time()}
            try:
                res = await arun(f"{a.query} #{i}", model=a.model, base_url=a.base_url, api_key="x", image=a.image,
                                 max_steps=a.max_steps, output_dir=root / f"task{i:03d}")
                t = res.trajectory
                timings = t.sandbox.get("timings", {})
                rec.update(t_ready=rec["t0"] + sum(timings.values()), exit_reason=t.exit_reason,
                           container=t.sandbox.get("container_id"), steps=len(t.steps))
                if t.exit_reason != "submitted":
                    rec["error"] = f"{t.exit_reason}: {t.exit_detail}"
            except Exception as e:
                rec["error"] = f"{type(e).__name__}: {e}"
            rec["t_run_end"] = rec["t_closed"] = time.time()
            return rec

    tasks = await asyncio.gather(*(one(i) for i in range(a.n)))
    out = {"tasks": tasks, "errors": sum(1 for t in tasks if "error" in t),
           "distinct_containers": len({t.get("container") for t in tasks if t.get("container")})}
    Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--model", required=True)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--image", default="insandbox:latest")
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--query", default="Concurrency probe task.")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    args.workers = args.workers or args.n
    asyncio.run(main(args))
