"""Reading trajectory.json for the viewer: a cheap summary for the runs list, the full record for a run's page.

The summary of a big file is read from its two ends only: trajectory.json is written by pydantic with
one top-level key per line in a fixed order (the task and config near the start, the exit reason and
the totals at the end), so the head up to "sandbox" and the tail from "exit_reason" are JSON objects
of their own. A file written some other way is parsed whole."""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Optional

from ..core.errors import DataError
from ..core.json_input import parse_json
from ..core.trajectory import SCHEMA_VERSION, Trajectory
from ..runs.trajectory_budget import load_trajectory

WHOLE_BELOW = 256 * 1024  # smaller files are simply parsed whole
ENDS = 256 * 1024  # bytes read from each end of a bigger one


def _head_tail(path: Path, size: int) -> Optional[dict]:
    with open(path, "rb") as f:
        head = f.read(ENDS).decode("utf-8", errors="replace")
        f.seek(max(size - ENDS, 0))
        tail = f.read().decode("utf-8", errors="replace")
    cut, start = head.find('\n "sandbox": '), tail.find('\n "exit_reason": ')
    if cut < 0 or start < 0:
        return None
    try:
        first = parse_json(head[:cut].rstrip().rstrip(",") + "\n}")
        last = parse_json("{" + tail[start:])
    except ValueError:
        return None
    return {**first, **last}


def read_summary(path: Path) -> dict:
    """The fields the runs list shows: run_id, mode, created_at, task, config, exit_reason, totals, ..."""
    size = os.stat(path).st_size
    data = _head_tail(path, size) if size > WHOLE_BELOW else None
    if data is None:
        data = parse_json(Path(path).read_text(encoding="utf-8", errors="replace"))  # nesting: one line
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not a trajectory")
    return {k: data.get(k) for k in ("run_id", "mode", "created_at", "finished_at", "task", "config", "exit_reason",
                                     "exit_detail", "totals")}


class UnreadableTrajectory(DataError):
    """trajectory.json exists but is not one insandbox can read (cut short, edited, from a newer version)."""


class TrajectoryCache:
    """Full trajectories of the runs being looked at, reloaded when the file changes (kept: the last few)."""

    def __init__(self, size: int = 8):
        self.size = size
        self._items: OrderedDict[str, tuple[tuple, Trajectory]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: Path) -> Trajectory:
        st = os.stat(path)
        stamp, key = (st.st_mtime_ns, st.st_size), str(path)
        with self._lock:
            hit = self._items.get(key)
            if hit and hit[0] == stamp:
                self._items.move_to_end(key)
                return hit[1]
        try:
            traj = load_trajectory(Path(path).read_bytes(), path)  # within a memory budget, as replay loads it
        except (OSError, ValueError) as e:  # ValueError: bad JSON, a failed validation, a newer schema
            raise UnreadableTrajectory(f"{path}: cannot be read as a trajectory: {_first_line(e)}") from None
        with self._lock:
            self._items[key] = (stamp, traj)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return traj


def trajectory_of(data: Any, where: str) -> Trajectory:
    """A trajectory held inside another record (a training's rollout), checked as Trajectory.loads checks a file."""
    if not isinstance(data, dict) or not data:
        raise UnreadableTrajectory(f"{where}: holds no trajectory")
    version = data.get("schema_version", 0)
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise UnreadableTrajectory(f"{where}: schema_version {version} is newer than this insandbox "
                                   f"({SCHEMA_VERSION}); upgrade insandbox")
    try:
        return Trajectory.model_validate(data)
    except ValueError as e:
        raise UnreadableTrajectory(f"{where}: cannot be read as a trajectory: {_first_line(e)}") from None


def tool_arguments(raw: str) -> Any:
    """A tool call's arguments as the model sent them: a dict when they are a JSON object, else the raw text."""
    try:
        value = parse_json(raw)  # arguments nested past its depth are shown as their text
    except (ValueError, TypeError):
        return raw
    return value if isinstance(value, dict) else raw


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return " ".join(lines[:3])[:500] if lines else type(error).__name__
