"""Soak: many sequential runs in one process, and what they leave behind.

    .venv/bin/python benchmarks/soak.py [--runs 1000] [--network bridge] [--json out.json]

Each run is an ordinary `insandbox.arun` (its own sandbox with the default limits, its own run
folder) against the scripted model: two tool calls (a command, writing the answer) and submit.
All runs share one event loop, as in a long-lived service or a benchmark. Printed: containers,
networks and volumes labelled insandbox before and after (and containers of this process left),
files under this process's temporary folder and insandbox-named entries in the system's, the
process's resident memory, open descriptors and threads at runs 1, 10 %, 50 % and 100 % of N, and
the wall time per run. A leak shows as a count that grows with N.

Run folders go to a work folder that is removed at the end (--keep to keep it); temporary files
go to a folder of their own (tempfile.tempdir), so nothing else on the machine is counted. The
scripted model runs in a process of its own (`insandbox scripted-server`), so the memory and
descriptors measured are insandbox's alone.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Optional

SCRIPT = {"turns": [
    {"tool": "execute_bash", "args": {"command": "echo soak; ls /testbed"}},
    {"tool": "str_replace_editor", "args": {"command": "create", "path": "/testbed/answer.txt", "file_text": "42"}},
    {"tool": "submit"}]}


@contextlib.contextmanager
def scripted_model(work: Path):
    """`insandbox scripted-server` playing SCRIPT in a child process; yields its base URL."""
    script = work / "script.json"
    script.write_text(json.dumps(SCRIPT))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "insandbox.cli", "scripted-server", str(script), "--port", str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/models", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the scripted model server did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def files_under(folder: Path) -> int:
    return sum(len(dirs) + len(files) for _, dirs, files in os.walk(folder))


def insandbox_named(folder: Path) -> set[str]:
    try:
        return {p.name for p in folder.iterdir() if "insandbox" in p.name.lower()}
    except OSError:
        return set()


def engine_counts() -> dict:
    """Docker objects labelled insandbox=1, and those of this process (its owner label)."""
    from insandbox.sandbox.docker import LABEL, LABEL_OWNER, engine, owner_label

    api = engine.api()
    label, own = {"label": f"{LABEL}=1"}, {"label": f"{LABEL_OWNER}={owner_label()}"}
    mine = api.containers(all=True, filters=own)
    return {"own_container_names": sorted(n for c in mine for n in c.get("Names") or [c["Id"][:12]]),
            "containers": len(api.containers(all=True, filters=label)),
            "networks": len(api.networks(filters=label)),
            "volumes": len((api.volumes(filters=label) or {}).get("Volumes") or []),
            "volumes_all": len((api.volumes() or {}).get("Volumes") or []),
            "own_containers": len(mine),
            "own_networks": len(api.networks(filters=own)),
            "own_volumes": len((api.volumes(filters=own) or {}).get("Volumes") or [])}


def checkpoints_of(n: int) -> list[int]:
    return sorted({1, max(n // 10, 1), max(n // 2, 1), n})


async def soak(runs: int, work: Path, network: str = "bridge", image: str = "insandbox:latest",
               on_run=None) -> dict:
    """Run `runs` sequential episodes; returns the figures (see the module docstring)."""
    system_tmp = Path(tempfile.gettempdir())
    own_tmp = work / "tmp"
    own_tmp.mkdir(parents=True, exist_ok=True)
    saved_tempdir, tempfile.tempdir = tempfile.tempdir, str(own_tmp)  # what insandbox puts in the temp folder
    try:
        return await _soak(runs, work, network, image, on_run, system_tmp, own_tmp)
    finally:
        tempfile.tempdir = saved_tempdir


async def _soak(runs: int, work: Path, network: str, image: str, on_run, system_tmp: Path, own_tmp: Path) -> dict:
    import insandbox

    before = {"engine": engine_counts(), "tmp_files": files_under(own_tmp),
              "system_tmp_insandbox": insandbox_named(system_tmp)}
    marks = set(checkpoints_of(runs))
    samples: list[dict] = []
    walls: list[float] = []
    failures: list[str] = []
    with scripted_model(work) as url:
        for i in range(1, runs + 1):
            t0 = time.perf_counter()
            result = await insandbox.arun("Soak: write 42 to /testbed/answer.txt", model="scripted",
                                          base_url=url, output_dir=work / "runs" / f"r{i:05d}", max_steps=6,
                                          image=image, network=network)
            walls.append(time.perf_counter() - t0)
            if str(result.exit_reason) != "submitted" or (result.answer or "").strip() != "42":
                failures.append(f"run {i}: {result.exit_reason}: {result.trajectory.exit_detail}")
            if i in marks:
                samples.append({"run": i, "rss_kib": rss_kib(), "fds": open_fds(), "threads": threading.active_count(),
                                "wall_s_mean_so_far": statistics.fmean(walls)})
            if on_run:
                on_run(i)
    after = {"engine": engine_counts(), "tmp_files": files_under(own_tmp),
             "system_tmp_insandbox": insandbox_named(system_tmp)}
    ordered = sorted(walls)
    left = sorted(set(after["engine"]["own_container_names"]) - set(before["engine"]["own_container_names"]))
    return {"runs": runs, "network": network, "failures": failures, "before": before, "after": after,
            "containers_left": left,  # this soak's own, not those an earlier user of the process left
            "system_tmp": str(system_tmp),
            "new_system_tmp_insandbox": sorted(after["system_tmp_insandbox"] - before["system_tmp_insandbox"]),
            "checkpoints": samples,
            "wall_s": {"mean": statistics.fmean(walls), "p50": ordered[len(ordered) // 2],
                       "p95": ordered[min(int(len(ordered) * 0.95), len(ordered) - 1)], "max": ordered[-1],
                       "first": walls[0], "total": sum(walls)}}


def table(fig: dict) -> str:
    b, a = fig["before"], fig["after"]
    lines = [f"soak: {fig['runs']} sequential runs (network {fig['network']}), {len(fig['failures'])} failed", "",
             "| | before | after |", "|---|---|---|"]
    for key, name in (("containers", "containers labelled insandbox"), ("own_containers", "containers of this process"),
                      ("networks", "networks labelled insandbox"), ("own_networks", "networks of this process"),
                      ("volumes", "volumes labelled insandbox"), ("own_volumes", "volumes of this process"),
                      ("volumes_all", "volumes (all)")):
        lines.append(f"| {name} | {b['engine'][key]} | {a['engine'][key]} |")
    lines.append(f"| files in the process's temp folder | {b['tmp_files']} | {a['tmp_files']} |")
    lines.append(f"| insandbox-named entries in {fig['system_tmp']} | "
                 f"{len(b['system_tmp_insandbox'])} | {len(a['system_tmp_insandbox'])} "
                 f"(new: {', '.join(fig['new_system_tmp_insandbox']) or 'none'}) |")
    lines += ["", "| run | RSS (MiB) | open fds | threads | mean wall per run so far (s) |", "|---|---|---|---|---|"]
    for c in fig["checkpoints"]:
        lines.append(f"| {c['run']} | {c['rss_kib'] / 1024:.1f} | {c['fds']} | {c['threads']} | "
                     f"{c['wall_s_mean_so_far']:.3f} |")
    w = fig["wall_s"]
    lines += ["", f"wall per run: mean {w['mean']:.3f} s, p50 {w['p50']:.3f} s, p95 {w['p95']:.3f} s, "
                  f"max {w['max']:.3f} s, first {w['first']:.3f} s; total {w['total'] / 60:.1f} min"]
    if fig["failures"]:
        lines += ["", "failed runs:"] + [f"  {f}" for f in fig["failures"][:20]]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--network", default="bridge")
    ap.add_argument("--image", default="insandbox:latest")
    ap.add_argument("--work", type=Path, help="work folder (default: a new one under runs/)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (run folders)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--progress", type=int, default=100, help="print a line every N runs (0: never)")
    args = ap.parse_args(argv)
    work = args.work or Path("runs") / f"soak-{time.strftime('%Y%m%d-%H%M%S')}"
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    def progress(i: int) -> None:
        if args.progress and i % args.progress == 0:
            print(f"  {i}/{args.runs} runs, {time.time() - t0:.0f} s, RSS {rss_kib() / 1024:.1f} MiB, "
                  f"{open_fds()} fds", file=sys.stderr, flush=True)

    try:
        fig = asyncio.run(soak(args.runs, work.resolve(), args.network, args.image, progress))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(table(fig))
    if args.json:
        fig["before"]["system_tmp_insandbox"] = sorted(fig["before"]["system_tmp_insandbox"])
        fig["after"]["system_tmp_insandbox"] = sorted(fig["after"]["system_tmp_insandbox"])
        args.json.write_text(json.dumps(fig, indent=1))
    return 1 if fig["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
