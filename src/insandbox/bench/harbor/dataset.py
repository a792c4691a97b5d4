"""Each Harbor task as a benchmark run of its own, with the task's image, limits, network and timeouts.

A task folder runs into the run folder given (`--out`), like any benchmark; a dataset folder runs each
task into `OUT/<task name>/`, and `OUT/harbor.json` lists them with their scores. Tasks run side by
side, at most `--concurrency` samples in flight in all (a task's samples are its `--repeats`). A run
folder of either kind is finished with `--resume`.

What the task declares wins over the command's settings: its cpus, memory (memory_mb), disk
(storage_mb), network mode (`public`: bridge, `no-network`: none, `allowlist`: the registries proxy
with the task's hosts added), its environment variables, and its agent timeout as the episode's time
limit. What it leaves out keeps the command's.
"""
from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Optional

from ...runs import layout
from ..store import write_atomic
from . import environment, task_spec
from .task import HarborTask, is_task_folder, load_tasks

INDEX = "harbor.json"  # a dataset's run folder: its tasks' folders and scores
ORACLE_COMMAND_TIMEOUT_S = 1800.0  # solve.sh runs as one command: the agent's timeout, else this

RunOne = Callable[..., Awaitable]  # (BenchConfig, progress, resume=...) -> BenchResult


def is_dataset_run(folder: Path) -> bool:
    return (Path(folder) / INDEX).is_file()


async def run_tasks(path: Path, cfg, run_one: RunOne, progress_for: Callable[[HarborTask], object],
                    on_status: Callable[[str], None] = lambda text: None) -> list:
    """Run the task at `path` (or each task of the dataset at `path`) as a benchmark; their BenchResults.
    `cfg` is the command's BenchConfig (`output_dir` set); `run_one` runs one benchmark run."""
    path = Path(path)
    tasks = load_tasks(path)
    single = is_task_folder(path)
    out = Path(cfg.output_dir)
    images: dict[str, tuple[str, str]] = {}  # a Dockerfile folder's image, checked once
    repeats = cfg.repeats or 1
    gate = asyncio.Semaphore(max(1, cfg.concurrency // repeats))
    if not single:
        out.mkdir(parents=True, exist_ok=True)
        _write_index(out, tasks, None)

    async def one(task: HarborTask):
        async with gate:
            task_cfg = await task_config(task, cfg, out if single else out / task.name, images, on_status)
            return await run_one(task_cfg, progress_for(task))

    results = await asyncio.gather(*(one(t) for t in tasks), return_exceptions=not single)
    if single:
        return list(results)
    _write_index(out, tasks, results)
    failed = [(t, r) for t, r in zip(tasks, results) if isinstance(r, BaseException)]
    for t, r in failed:
        if not isinstance(r, Exception):
            raise r  # Ctrl-C and the like: not a task's failure
        on_status(f"task {t.name}: {type(r).__name__}: {r}")
    return [r for r in results if not isinstance(r, BaseException)]


async def task_config(task: HarborTask, cfg, run_dir: Path, images: dict[str, tuple[str, str]],
                      on_status: Callable[[str], None]):
    """The BenchConfig of one task's run: its image, working folder, limits, network and time limit."""
    key = str(task.environment.dockerfile_dir or task.environment.image)
    if key not in images:  # an image is built and looked at once, however many tasks share it
        images[key] = await environment.prepare(task, cfg.run.backend, on_status)
    tag, workdir = images[key]
    oracle = cfg.agent == "oracle"
    env = task.environment
    run = cfg.run
    changes: dict = {"image": tag, "build_image": False, "env": {**run.env, **dict(env.env)}, "network": env.network,
                     "allow_hosts": list(env.allowed_hosts)}
    if env.cpus is not None:
        changes["cpus"] = env.cpus
    if env.memory_mb is not None:
        changes["memory"] = f"{env.memory_mb}m"
    if env.storage_mb is not None:
        changes["disk"] = f"{env.storage_mb}m"
    if task.agent_timeout_s is not None:
        changes["time_limit"] = task.agent_timeout_s
    if oracle:
        changes["timeout_per_command"] = max(run.timeout_per_command, task.agent_timeout_s or ORACLE_COMMAND_TIMEOUT_S)
    run = type(run).model_validate({**run.model_dump(), **changes})
    spec = task_spec(task, workdir, oracle=oracle)
    return cfg.model_copy(update={"task": str(task.path), "task_spec": spec.model_dump(), "run": run,
                                  "output_dir": run_dir, "concurrency": min(cfg.concurrency, cfg.repeats or 1)})


def resumable(folder: Path) -> list[Path]:
    """The task run folders of a dataset's run folder, for --resume."""
    index = json.loads((Path(folder) / INDEX).read_text(encoding="utf-8"))
    return [Path(folder) / t["folder"] for t in index["tasks"] if (Path(folder) / t["folder"] / layout.BENCH).is_file()]


def _write_index(out: Path, tasks: list[HarborTask], results: Optional[list]) -> None:
    rows = []
    for i, t in enumerate(tasks):
        row = {"task": t.name, "path": str(t.path), "folder": t.name}
        if results is not None:
            r = results[i]
            if isinstance(r, BaseException):
                row["error"] = f"{type(r).__name__}: {r}"
            else:
                row.update(_score_of(r.records))
        rows.append(row)
    scores = [r["mean_reward"] for r in rows if r.get("mean_reward") is not None]
    index = {"tasks": rows, "tasks_scored": len(scores),
             "mean_reward": sum(scores) / len(scores) if scores else None}
    write_atomic(out / INDEX, json.dumps(index, indent=1, ensure_ascii=False))


def _score_of(records: list[dict]) -> dict:
    """A task's mean reward over its samples, a failed sample counted as 0 (as in the accuracy)."""
    n = len(records)
    errors = sum(1 for r in records if r.get("error"))
    total = sum(r.get("score") or 0.0 for r in records)
    mean = total / n if n else None
    return {"samples": n, "errors": errors, "mean_reward": None if mean is None or not math.isfinite(mean) else mean}
