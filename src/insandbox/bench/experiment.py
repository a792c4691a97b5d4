"""Which benchmark runs are the same experiment, and how the report names the runs it compares.

The settings of a run that change what is measured define its experiment: the model, the
task (its prompts, scorer, data source, step limit), the effective repeats and max_steps,
sampling (temperature, max_tokens, extra_body, send_reasoning), the sandbox (image, limits,
network, environment), the token and time budgets and the judge. What only changes how a
run was carried out does not: the endpoint address and key, concurrency, retries, time-outs
of requests, the price file, folders, which rows were selected (--limit, --ids, --data:
pooling rows split over several runs is what --merge is for) and timestamps.

`insandbox report` compares runs side by side, each labelled by its model and the settings
that differ from the other runs of its task (and its folder name where two runs of one task
have identical settings). With --merge, runs of the same task and model are pooled, and only
when their settings are identical.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..config import RunConfig
from ..core.redact import redact
from ..runs import layout
from .store import ResultStore, latest
from .tasks import TaskSpec

# settings recorded in bench.json that do not define the experiment
_RUN_NOT_DEFINING = {"base_url", "api_key", "api_key_set", "max_retries", "request_timeout", "output_dir", "runs_root",
                     "build_image", "mode", "model", "max_steps", "prices"}
_BENCH_NOT_DEFINING = {"task", "data", "limit", "ids", "concurrency", "retries", "retry_backoff_s", "output_dir",
                       "runs_root", "judge_base_url", "judge_api_key", "mode", "repeats", "run"}
_TASK_NOT_DEFINING = {"description", "source", "repeats"}
_ABSENT = "(not recorded)"


def _plain(value: Any) -> Any:
    """A JSON value, so that settings read from different places compare equal."""
    return json.loads(json.dumps(value, default=str, sort_keys=True))


def _digest(value: Any) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:8]


def _defaults(model_cls) -> dict:
    """Each field's default, to fill what an older bench.json did not record."""
    out = {}
    for name, info in model_cls.model_fields.items():
        if not info.is_required():
            out[name] = _plain(info.get_default(call_default_factory=True))
    return out


@dataclass
class RunInfo:
    path: Path
    model: str
    task: str
    repeats: int
    settings: dict  # setting -> value, everything that defines the experiment (model and task included)
    records: list[dict] = field(default_factory=list)
    price: Optional[dict] = None  # the price its samples were charged at (summary.json), where recorded


def read_run(run_dir: Path) -> RunInfo:
    run_dir = Path(run_dir)
    meta_path = run_dir / layout.BENCH
    if not meta_path.is_file():
        raise ValueError(f"{run_dir} is not a benchmark run folder (no {layout.BENCH})")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    config = meta.get("config") or {}
    run = {**_defaults(RunConfig), **_plain(config.get("run") or {})}
    run["extra_body"] = redact(run.get("extra_body"))  # runs recorded before redaction (redact.py) held it verbatim
    task = {**_defaults(TaskSpec), **_plain(meta.get("task") or {})}
    model, price = None, None
    summary_path = run_dir / layout.SUMMARY
    if summary_path.is_file():
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        model, price = summary.get("model"), summary.get("price")
    model = model or run.get("model") or "embedded"
    task_name = task.get("name") or config.get("task") or "?"
    repeats = int(meta.get("repeats") or config.get("repeats") or task.get("repeats") or 1)
    max_steps = meta.get("max_steps")  # the effective step limit, recorded since it can come from the task
    if max_steps is None:
        default_steps = RunConfig.model_fields["max_steps"].default
        max_steps = task.get("max_steps") if task.get("max_steps") and run.get("max_steps") == default_steps \
            else run.get("max_steps")
    settings = {"model": model, "task": task_name, "repeats": repeats, "max_steps": max_steps}
    settings.update({k: v for k, v in run.items() if k not in _RUN_NOT_DEFINING})
    if isinstance(settings.get("env"), dict) and settings["env"]:  # values may be secrets: keys and a digest only
        settings["env"] = f"{','.join(sorted(settings['env']))} #{_digest(settings['env'])}"
    settings.update({k: v for k, v in config.items() if k not in _BENCH_NOT_DEFINING})
    settings.update({f"task.{k}": v for k, v in task.items() if k not in _TASK_NOT_DEFINING and k != "name"})
    records = latest(ResultStore(run_dir).load())
    return RunInfo(run_dir, model, task_name, repeats, settings, records, price)


def differing(settings: list[dict]) -> list[str]:
    """The settings whose values are not the same in all of `settings`."""
    keys = sorted({k for s in settings for k in s})
    return [k for k in keys if len({json.dumps(s.get(k, _ABSENT), sort_keys=True) for s in settings}) > 1]


def show(value: Any) -> str:
    """A setting's value, short: long values (prompts) by a digest."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 32 else f"#{_digest(value)}"


@dataclass
class Unit:
    """What the report compares: one run, or runs pooled."""

    label: str
    model: str
    task: str
    settings: dict
    runs: list[RunInfo]
    differs: dict = field(default_factory=dict)  # the settings that tell it apart from the other runs of its task

    @property
    def records(self) -> list[dict]:
        return [r for run in self.runs for r in run.records]


def pool_runs(runs: list[RunInfo]) -> list[list[RunInfo]]:
    """Runs of the same task and model, pooled; a ValueError naming the settings when they differ."""
    groups: dict[tuple[str, str], list[RunInfo]] = {}
    for run in runs:
        groups.setdefault((run.task, run.model), []).append(run)
    for (task, model), members in groups.items():
        diff = differing([m.settings for m in members])
        if diff:
            lines = [f"  {k}: " + ", ".join(f"{m.path.name}={show(m.settings.get(k, _ABSENT))}" for m in members)
                     for k in diff]
            raise ValueError(f"cannot pool the {task} runs of {model}: their settings differ\n" + "\n".join(lines))
    return list(groups.values())


def _renumber_repeats(members: list[RunInfo]) -> None:
    """Pooled runs may hold the same items: their repeats follow one another (run 1: 0..R1-1, run 2: R1..),
    per item and mode, so no two samples share a key and a run's sandbox and plain samples pair with each other
    (a sandbox-only run with a plain-only one)."""
    taken: dict[tuple[str, str], int] = {}
    for run in members:
        for rec in run.records:
            rec["run_repeat"] = rec["repeat"]
            rec["repeat"] = taken.get((str(rec["id"]), rec["mode"]), 0) + int(rec["repeat"])
        for key in {(str(r["id"]), r["mode"]) for r in run.records}:
            taken[key] = taken.get(key, 0) + run.repeats


def units_of(run_dirs: list[Path], pool: bool = False) -> list[Unit]:
    runs = [read_run(d) for d in run_dirs]
    for run in runs:
        for rec in run.records:
            rec["run"] = run.path.name
    members_list = pool_runs(runs) if pool else [[r] for r in runs]
    units = []
    for members in members_list:
        if len(members) > 1:
            _renumber_repeats(members)
        first = members[0]
        units.append(Unit(first.model, first.model, first.task, first.settings, members))
    for unit in units:  # label: the model and the settings that differ from other runs of the task
        peers = [u for u in units if u.task == unit.task]
        unit.differs = {k: unit.settings.get(k, _ABSENT) for k in differing([p.settings for p in peers])
                        if k not in ("model", "task")}
        pooled = [f"{len(unit.runs)} runs pooled"] if len(unit.runs) > 1 else []
        unit.label = " · ".join([unit.model] + [f"{k}={show(v)}" for k, v in unit.differs.items()] + pooled)
    shared = [u for u in units if sum(1 for v in units if (v.task, v.label) == (u.task, u.label)) > 1]
    for unit in shared:  # identical settings: the folder names tell them apart
        unit.label += " · " + "+".join(r.path.name for r in unit.runs)
    return units


def same_settings(units: list[Unit]) -> list[list[Unit]]:
    """Compared runs that --merge would pool (same task and model, identical settings)."""
    by_key: dict[str, list[Unit]] = {}
    for unit in units:
        by_key.setdefault(json.dumps(unit.settings, sort_keys=True, default=str), []).append(unit)
    return [v for v in by_key.values() if len(v) > 1]
