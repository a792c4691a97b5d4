"""ATIF files from what insandbox writes, and run folders from ATIF files.

`export_atif(PATH)` takes a run folder (trajectory.json), a benchmark's folder (every sample under
samples/), a Harbor dataset's folder (every task's samples), or an RL rollouts file (rollouts.jsonl, or
the folder holding it: each record's token ids and logprobs go into its agent steps' metrics). One
trajectory makes one ATIF file; several make a folder of them, named after where each came from.
`import_atif(FILE, RUN_DIR)` writes a run folder (trajectory.json) that `insandbox view` shows.
A run folder or ATIF file may come from anyone: each file is loaded within a memory budget
(runs/trajectory_budget.py) and a bad one is refused in one line.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

from .. import __version__
from ..core.errors import DataError
from ..core.json_input import BadJSON, parse_json
from ..core.trajectory import Trajectory
from ..runs import layout
from ..runs.trajectory_budget import load_trajectory
from .atif import from_atif, to_atif

ROLLOUTS = "rollouts.jsonl"
MAX_ATIF_BYTES = 512 << 20


def export_atif(path: Path, out: Optional[Path]) -> list[Path]:
    """Write the ATIF of every trajectory under `path`; the files written. `out`: the file (one
    trajectory) or folder (several); default `path`/atif.json or `path`/atif/."""
    path = Path(path)
    found = list(_sources(path))
    if not found:
        raise DataError(f"{path}: no trajectory.json, samples/ or {ROLLOUTS} to export")
    single = len(found) == 1 and (path / layout.TRAJECTORY).is_file()
    written = []
    for name, doc in ((name, make()) for name, make in found):
        if single:
            target = Path(out) if out else path / "atif.json"
        else:
            target = (Path(out) if out else path / "atif") / f"{name}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(doc, ensure_ascii=False, indent=1), encoding="utf-8")
        written.append(target)
    return written


def import_atif(file: Path, run_dir: Path) -> Path:
    """A run folder made from an ATIF file; its trajectory.json's path."""
    raw = Path(file).read_bytes()
    if len(raw) > MAX_ATIF_BYTES:
        raise DataError(f"{file}: {len(raw)} bytes; an ATIF file over {MAX_ATIF_BYTES >> 20} MiB is refused")
    try:
        doc = parse_json(raw)
    except BadJSON as e:
        raise DataError(f"{file}: not JSON: {e}") from None
    if not isinstance(doc, dict) or not str(doc.get("schema_version", "")).startswith("ATIF-"):
        raise DataError(f"{file}: not an ATIF trajectory (no schema_version \"ATIF-v1.x\")")
    if not isinstance(doc.get("steps"), list) or not doc["steps"]:
        raise DataError(f"{file}: an ATIF trajectory has at least one step")
    try:
        traj = from_atif(doc)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise DataError(f"{file}: not an ATIF trajectory insandbox can read: {str(e).splitlines()[0]}") from None
    run_dir = Path(run_dir)
    if (run_dir / layout.TRAJECTORY).exists():
        raise DataError(f"{run_dir} holds a run already; import into a new folder")
    run_dir.mkdir(parents=True, exist_ok=True)
    traj.save(run_dir / layout.TRAJECTORY)
    return run_dir / layout.TRAJECTORY


def _sources(path: Path) -> Iterator[tuple[str, callable]]:
    """(name, a maker of the ATIF document) for each trajectory under `path`."""
    if path.is_file():
        if path.name.endswith(".jsonl"):
            yield from _rollouts(path)
            return
        yield path.stem, lambda: to_atif(_load(path), __version__)
        return
    if (path / layout.TRAJECTORY).is_file():
        yield path.name, lambda: to_atif(_load(path / layout.TRAJECTORY), __version__)
        return
    if (path / ROLLOUTS).is_file():
        yield from _rollouts(path / ROLLOUTS)
        return
    for traj in sorted(path.glob(f"**/{layout.TRAJECTORY}")):
        if traj.is_symlink() or any(p.is_symlink() for p in traj.relative_to(path).parents if str(p) != "."):
            continue  # a run folder from elsewhere may point anywhere: only its own files are read
        rel = traj.parent.relative_to(path)
        yield "__".join(rel.parts) or path.name, (lambda t=traj: to_atif(_load(t), __version__))


def _rollouts(file: Path) -> Iterator[tuple[str, callable]]:
    with open(file, "rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = parse_json(line)
            except BadJSON as e:
                raise DataError(f"{file} line {n}: not JSON: {e}") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("trajectory"), dict):
                raise DataError(f"{file} line {n}: not a rollout record (no trajectory)")
            name = str(rec.get("id") or n).replace("/", "__")
            yield name, (lambda r=rec, n=n: _rollout_doc(r, file, n))


def _rollout_doc(rec: dict, file: Path, n: int) -> dict:
    try:
        traj = Trajectory.model_validate(rec["trajectory"])
    except ValueError as e:
        raise DataError(f"{file} line {n}: its trajectory is not one: {str(e).splitlines()[0]}") from None
    return to_atif(traj, __version__, tokens=rec)


def _load(path: Path) -> Trajectory:
    try:
        return load_trajectory(path.read_bytes(), path)
    except ValueError as e:
        raise DataError(str(e).splitlines()[0]) from None
