"""Training folders (`insandbox rl train --out DIR`) for the viewer: their per-step figures, the charts of them
(inline SVG made here, no script), and the rollouts each step kept.

What the trainer writes (rl/trainers/trl_train.py, metrics.py, rollout_hook.py; the viewer does not import
them, it sits beside rl): config.yaml and an empty metrics.jsonl before the first step, then one metrics.jsonl
row per optimizer step (step, max_steps, loss, reward_mean, reward_std, rollouts, rollouts_per_min,
exit_reasons as counts, ...), each step's rollout records in rollouts/step-NNNNN.jsonl (one file per rank
when there are several: step-NNNNN.rank-R.jsonl), each record holding its trajectory as trajectory.json of
`insandbox run` would; summary.json at the end.

Everything here is read from files a training (or anyone) wrote: a line that does not parse (the last one,
still being written) is skipped, a figure that is not a finite number is a gap, and no file is read through
a symbolic link (files.resolve_inside)."""
from __future__ import annotations

import json
import math
import os
import re
import stat
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml
from markupsafe import Markup, escape

from .files import NotInside, resolve_inside

METRICS = "metrics.jsonl"
CONFIG = "config.yaml"
SUMMARY = "summary.json"
ROLLOUTS = "rollouts"
STEP_FILE = re.compile(r"step-(\d{1,9})(?:\.rank-(\d{1,4}))?\.jsonl")
MAX_CONFIG = 1 << 20  # bytes of config.yaml / summary.json read at most
MAX_METRICS = 64 << 20


def is_training(names: set[str], subdirs: list[str]) -> bool:
    """A folder `rl train` wrote: two of its config.yaml, metrics.jsonl and rollouts/ (metrics.jsonl may be gone
    or not yet written, a config.yaml alone is any project's)."""
    return sum((METRICS in names, CONFIG in names, ROLLOUTS in subdirs)) >= 2


def read_inside(folder: Path, rel: str, limit: int) -> Optional[bytes]:
    """The bytes of folder/rel (at most `limit`), None when it is missing, not a plain file or reached through a
    link (refused even if the link points inside)."""
    try:
        path = resolve_inside(folder, rel)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except (NotInside, OSError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb") as f:
            fd = -1
            return f.read(limit)
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)


def stamp_of(folder: Path, rel: str) -> Optional[tuple]:
    try:
        st = os.lstat(Path(folder) / rel)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino, st.st_mode


# ---------------------------------------------------------------------- metrics.jsonl
def number(value: Any) -> Optional[float]:
    """A figure as a float: None for a gap (null, NaN, text, a boolean)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:  # an int beyond any float
        return None
    return value if math.isfinite(value) else None


def _count(value: Any) -> Optional[int]:
    n = number(value)
    return int(n) if n is not None and n >= 0 and n == int(n) else None


@dataclass
class Metrics:
    rows: list[dict]  # one per step, by step, the last row of a step written twice
    skipped: int = 0  # lines that did not parse (a line being written, a damaged one)
    missing: bool = False  # no metrics.jsonl (or one that cannot be read)


def parse_metrics(data: Optional[bytes]) -> Metrics:
    if data is None:
        return Metrics([], missing=True)
    by_step: dict[int, dict] = {}
    skipped = 0
    for line in data.decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            skipped += 1
            continue
        step = _count(row.get("step")) if isinstance(row, dict) else None
        if step is None:
            skipped += 1
            continue
        by_step[step] = row
    return Metrics([by_step[s] for s in sorted(by_step)], skipped)


def read_metrics(folder: Path) -> Metrics:
    return parse_metrics(read_inside(folder, METRICS, MAX_METRICS))


@dataclass
class Series:
    """The figures the charts draw, one value (or gap) per step."""

    steps: list[int]
    reward_mean: list[Optional[float]]
    reward_std: list[Optional[float]]
    loss: list[Optional[float]]
    rollouts_per_min: list[Optional[float]]
    exit_reasons: dict[str, list[int]]  # reason -> count at each step (0 where the step had none)


PLOTTED = 1e15  # a figure beyond this is a gap in the charts (the scale would lose every other point)


def _plotted(value: Any) -> Optional[float]:
    v = number(value)
    return v if v is not None and abs(v) < PLOTTED else None


def series(rows: list[dict]) -> Series:
    reasons: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        exits = row.get("exit_reasons")
        for reason, count in (exits.items() if isinstance(exits, dict) else ()):
            n = _count(count)
            if n and n < PLOTTED:
                reasons.setdefault(str(reason), [0] * len(rows))[i] += n
    def col(key: str) -> list[Optional[float]]:
        return [_plotted(r.get(key)) for r in rows]

    return Series(steps=[int(r["step"]) for r in rows], reward_mean=col("reward_mean"), reward_std=col("reward_std"),
                  loss=col("loss"), rollouts_per_min=col("rollouts_per_min"),
                  exit_reasons=dict(sorted(reasons.items(), key=lambda kv: (-sum(kv[1]), kv[0]))))


# ---------------------------------------------------------------------- charts
W, H = 560, 210
LEFT, RIGHT, TOP, BOTTOM = 52, 12, 26, 28
PALETTE = ("#1a7f37", "#cf222e", "#9a6700", "#0969da", "#8250df", "#bf3989", "#1b7c83", "#656d76")
EXIT_COLORS = {"submitted": "#1a7f37", "completed": "#1a7f37", "max_steps": "#9a6700", "time_limit": "#e16f24",
               "token_budget": "#d4a72c", "context_length": "#bc4c00"}


def fmt(v: float) -> str:
    return "0" if v == 0 else f"{v:.4g}"


def _range(values: list[float]) -> tuple[float, float]:
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if hi - lo < 1e-12:
        pad = abs(hi) * 0.1 or 0.5
        lo, hi = lo - pad, hi + pad
    return lo, hi


def nice_ticks(lo: float, hi: float, most: int = 5) -> list[float]:
    """Round values (1, 2, 2.5 or 5 times a power of ten apart) from at or below `lo` to at or above `hi`."""
    raw = (hi - lo) / (most - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-9))
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(i * step, 12) for i in range(first, last + 1)]


class _Frame:
    """The plot area of one chart: steps across, values up."""

    def __init__(self, steps: list[int], lo: float, hi: float):
        self.ticks = nice_ticks(lo, hi)
        self.steps, self.lo, self.hi = steps, self.ticks[0], self.ticks[-1]
        self.x0, self.x1, self.y0, self.y1 = LEFT, W - RIGHT, H - BOTTOM, TOP
        self.s0 = steps[0] if steps else 0
        self.s1 = steps[-1] if steps else 1

    def x(self, step: float) -> float:
        if self.s1 == self.s0:
            return (self.x0 + self.x1) / 2
        return self.x0 + (step - self.s0) / (self.s1 - self.s0) * (self.x1 - self.x0)

    def y(self, v: float) -> float:
        return self.y0 - (v - self.lo) / (self.hi - self.lo) * (self.y0 - self.y1)

    def axes(self) -> list[str]:
        out = [f'<line class="axis" x1="{self.x0}" y1="{self.y0}" x2="{self.x1}" y2="{self.y0}"/>',
               f'<line class="axis" x1="{self.x0}" y1="{self.y1}" x2="{self.x0}" y2="{self.y0}"/>']
        for v in self.ticks:
            y = self.y(v)
            out.append(f'<line class="grid" x1="{self.x0}" y1="{y:.1f}" x2="{self.x1}" y2="{y:.1f}"/>'
                       f'<text class="tick" x="{self.x0 - 4}" y="{y + 4:.1f}" text-anchor="end">{fmt(v)}</text>')
        for s in _step_ticks(self.steps):
            out.append(f'<text class="tick" x="{self.x(s):.1f}" y="{self.y0 + 16}" text-anchor="middle">{s}</text>')
        out.append(f'<text class="tick" x="{self.x1}" y="{H - 2}" text-anchor="end">step</text>')
        return out


def _step_ticks(steps: list[int], most: int = 8) -> list[int]:
    if len(steps) <= most:
        return steps
    every = math.ceil(len(steps) / (most - 1))
    picked = steps[::every]
    if picked[-1] != steps[-1]:
        picked = (picked[:-1] if len(picked) >= most else picked) + [steps[-1]]
    return picked


def _svg(name: str, title: str, body: list[str], note: str = "") -> Markup:
    label = escape(title)
    head = (f'<svg class="chart" data-chart="{escape(name)}" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
            f'role="img" aria-label="{label}" xmlns="http://www.w3.org/2000/svg">'
            f'<text class="chart-title" x="{LEFT}" y="16">{label}</text>')
    if note:
        head += f'<text class="tick" x="{W - RIGHT}" y="16" text-anchor="end">{escape(note)}</text>'
    return Markup(head + "".join(body) + "</svg>")


def _empty(name: str, title: str) -> Markup:
    return _svg(name, title, [f'<text class="tick" x="{W / 2}" y="{H / 2}" text-anchor="middle">no steps yet</text>'])


def _runs(frame: _Frame, values: list[Optional[float]]) -> list[list[tuple[int, float]]]:
    """The values as unbroken runs of points (a gap ends one)."""
    out: list[list[tuple[int, float]]] = [[]]
    for s, v in zip(frame.steps, values):
        if v is None:
            if out[-1]:
                out.append([])
        else:
            out[-1].append((s, v))
    return [r for r in out if r]


def line_chart(name: str, title: str, steps: list[int], values: list[Optional[float]],
               spread: Optional[list[Optional[float]]] = None, link=None) -> Markup:
    """A line over the steps, with a band of ± `spread` around it when given; each point has its value as a
    tooltip and, with `link(step)`, links to that step's rollouts."""
    if not any(v is not None for v in values):
        return _empty(name, title)
    lows, highs = [], []
    for v, d in zip(values, spread or [None] * len(values)):
        if v is not None:
            lows.append(v - (d or 0.0))
            highs.append(v + (d or 0.0))
    frame = _Frame(steps, *_range(lows + highs))
    body = frame.axes()
    if spread is not None:
        band = [None if v is None else (v, d or 0.0) for v, d in zip(values, spread)]
        for run in _runs(frame, [None if b is None else b[0] for b in band]):
            ds = {s: d for s, d in zip(steps, spread)}
            upper = [f"{frame.x(s):.1f},{frame.y(v + (ds[s] or 0.0)):.1f}" for s, v in run]
            lower = [f"{frame.x(s):.1f},{frame.y(v - (ds[s] or 0.0)):.1f}" for s, v in reversed(run)]
            body.append(f'<polygon class="band" points="{" ".join(upper + lower)}"/>')
    for run in _runs(frame, values):
        pts = " ".join(f"{frame.x(s):.1f},{frame.y(v):.1f}" for s, v in run)
        body.append(f'<polyline class="line" points="{pts}"/>')
    for i, (s, v) in enumerate(zip(steps, values)):
        if v is None:
            continue
        tip = f"step {s}: {fmt(v)}"
        if spread is not None and spread[i] is not None:
            tip += f" ± {fmt(spread[i])}"
        dot = (f'<circle class="point" cx="{frame.x(s):.1f}" cy="{frame.y(v):.1f}" r="3">'
               f"<title>{escape(tip)}</title></circle>")
        href = link(s) if link else None
        body.append(f'<a href="{escape(href)}">{dot}</a>' if href else dot)
    return _svg(name, title, body)


def stacked_bars(name: str, title: str, steps: list[int], stacks: dict[str, list[int]], link=None) -> Markup:
    """A bar per step, stacked by category (exit reasons), with a legend; a bar links to its step's rollouts."""
    totals = [sum(col) for col in zip(*stacks.values())] if stacks else []
    if not steps or not any(totals):
        return _empty(name, title)
    frame = _Frame(steps, 0.0, float(max(totals)))
    body = frame.axes()
    span = (frame.x1 - frame.x0) / max(len(steps), 1)
    width = max(min(span * 0.7, 40), 2)
    colors = {reason: EXIT_COLORS.get(reason, PALETTE[(i + 1) % len(PALETTE)]) for i, reason in
              enumerate(stacks)}
    for i, s in enumerate(steps):
        x = frame.x(s) - width / 2
        if len(steps) > 1:  # keep the first and last bars inside the plot
            x = min(max(x, frame.x0 + 1), frame.x1 - width)
        base = 0
        parts = []
        for reason, counts in stacks.items():
            n = counts[i]
            if not n:
                continue
            y_top, y_bottom = frame.y(base + n), frame.y(base)
            parts.append(f'<rect class="bar" data-reason="{escape(reason)}" x="{x:.1f}" y="{y_top:.1f}" '
                         f'width="{width:.1f}" height="{max(y_bottom - y_top, 0.5):.1f}" fill="{colors[reason]}">'
                         f"<title>{escape(f'step {s}: {reason} {n}')}</title></rect>")
            base += n
        group = "".join(parts)
        href = link(s) if link else None
        body.append(f'<a href="{escape(href)}">{group}</a>' if href and group else group)
    legend = "".join(f'<span class="legend-item"><i style="background:{colors[r]}"></i>{escape(r)} '
                     f"{sum(c)}</span>" for r, c in stacks.items())
    return _svg(name, title, body) + Markup(f'<div class="legend">{legend}</div>')


def charts(s: Series, link=None) -> list[Markup]:
    """The training page's charts: reward mean ± std, loss, exit reasons, rollouts per minute."""
    return [line_chart("reward", "reward mean ± std", s.steps, s.reward_mean, s.reward_std, link),
            line_chart("loss", "loss", s.steps, s.loss, None, link),
            stacked_bars("exits", "exit reasons (rollouts)", s.steps, s.exit_reasons, link),
            line_chart("speed", "rollouts per minute", s.steps, s.rollouts_per_min, None, link)]


# ---------------------------------------------------------------------- the folder
@dataclass
class TrainEntry:
    tid: str
    path: Path
    rel: str
    model: Optional[str] = None
    max_steps: Optional[int] = None
    steps: int = 0  # steps in metrics.jsonl
    last_reward: Optional[float] = None
    finished: bool = False  # summary.json is there
    live: bool = False
    kind: str = "training"


def read_yaml_config(folder: Path) -> dict:
    data = read_inside(folder, CONFIG, MAX_CONFIG)
    if data is None:
        return {}
    try:
        value = yaml.safe_load(data.decode("utf-8", errors="replace"))
    except yaml.YAMLError:
        return {}
    return value if isinstance(value, dict) else {}


def read_summary_json(folder: Path) -> Optional[dict]:
    data = read_inside(folder, SUMMARY, MAX_CONFIG)
    try:
        value = json.loads(data) if data is not None else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def describe(entry: TrainEntry, config: dict, metrics: Metrics, finished: bool) -> TrainEntry:
    model = config.get("model")
    entry.model = str(model) if model is not None else None
    grpo = config.get("grpo") if isinstance(config.get("grpo"), dict) else {}
    entry.max_steps = _count(grpo.get("max_steps"))
    if metrics.rows:
        entry.max_steps = _count(metrics.rows[-1].get("max_steps")) or entry.max_steps
        entry.last_reward = number(metrics.rows[-1].get("reward_mean"))
    entry.steps = len(metrics.rows)
    entry.finished = finished
    return entry


# ---------------------------------------------------------------------- rollouts
def step_files(folder: Path) -> dict[int, list[str]]:
    """The rollout files of each step, by name as listed in rollouts/ (never a name from a URL)."""
    try:
        base = resolve_inside(folder, ROLLOUTS)
        with os.scandir(base) as it:
            names = [e.name for e in it if e.is_file(follow_symlinks=False)]  # a link is no step's file
    except (NotInside, OSError):
        return {}
    out: dict[int, list[tuple[int, str]]] = {}
    for name in names:
        m = STEP_FILE.fullmatch(name)
        if m:
            out.setdefault(int(m[1]), []).append((int(m[2] or 0), name))
    return {step: [n for _, n in sorted(files)] for step, files in sorted(out.items())}


ROW_FIELDS = ("id", "task_id", "group", "sample", "reward", "exit_reason", "exit_detail", "masked", "truncated",
              "num_turns", "tool_calls", "timings")


@dataclass
class Rollout:
    """One record of a step's files, without its token ids: what the step's table shows."""

    index: int  # its place in the step (files in rank order, lines in file order)
    fields: dict
    has_trajectory: bool
    file: str = ""
    line: int = 0


@dataclass
class StepRollouts:
    rollouts: list[Rollout] = field(default_factory=list)
    skipped: int = 0


class RolloutFiles:
    """Step files parsed once per change (kept: the last few), the records' trajectories kept aside by index."""

    def __init__(self, size: int = 6):
        self.size = size
        self._items: OrderedDict[str, tuple[tuple, list[Optional[dict]]]] = OrderedDict()
        self._lock = threading.Lock()

    def _records(self, folder: Path, name: str) -> Optional[list[Optional[dict]]]:
        rel = f"{ROLLOUTS}/{name}"
        stamp, key = stamp_of(folder, rel), str(Path(folder) / rel)
        with self._lock:
            hit = self._items.get(key)
            if hit and hit[0] == stamp:
                self._items.move_to_end(key)
                return hit[1]
        data = read_inside(folder, rel, 1 << 31)
        if data is None:
            return None
        records: list[Optional[dict]] = []
        for line in data.decode("utf-8", errors="replace").splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                rec = None
            # kept without the token ids: the table's fields and the trajectory
            records.append({k: rec.get(k) for k in (*ROW_FIELDS, "trajectory")} if isinstance(rec, dict) else None)
        with self._lock:
            self._items[key] = (stamp, records)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return records

    def step(self, folder: Path, names: list[str]) -> StepRollouts:
        out = StepRollouts()
        for name in names:
            for line, rec in enumerate(self._records(folder, name) or []):
                if rec is None:
                    out.skipped += 1
                    continue
                traj = rec.get("trajectory")
                out.rollouts.append(Rollout(index=len(out.rollouts), fields={k: rec.get(k) for k in ROW_FIELDS},
                                            has_trajectory=isinstance(traj, dict) and bool(traj), file=name,
                                            line=line))
        return out

    def trajectory(self, folder: Path, names: list[str], index: int) -> tuple[Optional[dict], Optional[dict]]:
        """The record at `index` of the step (without its token ids) and its trajectory, (None, None) if none."""
        n = 0
        for name in names:
            recs = [r for r in (self._records(folder, name) or []) if r is not None]
            if index < n + len(recs):
                rec = recs[index - n]
                traj = rec.get("trajectory")
                return {k: rec.get(k) for k in ROW_FIELDS}, traj if isinstance(traj, dict) else None
            n += len(recs)
        return None, None
