"""Finding the runs and benchmarks under the viewer's root folder, cheaply enough to do on every request.

A run is a folder holding trajectory.json; a benchmark is a folder holding bench.json or results.jsonl,
whose samples are the run folders under its samples/; a training is a folder `insandbox rl train` wrote
(training.is_training), whose subfolders (checkpoints, rollouts) are not walked. The walk keeps each
folder's listing until the folder's mtime changes, skips what cannot hold runs (a run's files/ and inputs/,
a benchmark's report/, hidden folders), and is done at most once a second however many requests ask. A run's
summary is read once per change of its trajectory.json; a benchmark sample that has its record in
results.jsonl takes everything from that record and its trajectory is not opened at all.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..runs import layout
from ..runs.layout import BENCH, RESULTS, SUMMARY, TRAJECTORY
from .training import (
    CONFIG,
    METRICS,
    ROLLOUTS,
    TrainEntry,
    describe,
    is_training,
    read_metrics,
    read_summary_json,
    read_yaml_config,
    stamp_of,
)
from .training import SUMMARY as TRAIN_SUMMARY
from .trajectories import read_summary

SKIP_IN_RUN = {layout.FILES, layout.INPUTS}
SKIP_ANYWHERE = {"node_modules", "__pycache__", layout.REPORT}
MAX_DEPTH = 12
STALE_S = 15 * 60  # a run without an exit reason whose file has not changed for this long is not live


UNREADABLE = "unreadable"  # the exit reason shown for a trajectory.json that cannot be read


def folder_id(rel: str) -> str:
    """A stable, URL-safe id for a folder: a hash of its path relative to the root."""
    return hashlib.sha1(rel.encode("utf-8", errors="surrogateescape")).hexdigest()[:12]


@dataclass
class RunEntry:
    rid: str
    path: Path
    rel: str
    task: str  # the benchmark's task, or "run"
    item: str  # the benchmark row's id, the run's task id, or its run id
    mode: str  # "sandbox" or "llm" (plain)
    repeat: Optional[int] = None
    bench: Optional[str] = None  # the benchmark's id, for a sample
    score: Optional[float] = None
    exit_reason: Optional[str] = None
    error: Optional[str] = None
    model: Optional[str] = None
    steps: int = 0
    tokens: int = 0
    wall_s: Optional[float] = None
    cost: Optional[float] = None
    started: Optional[float] = None  # unix time
    live: bool = False

    @property
    def unfinished(self) -> bool:
        return self.exit_reason is None and not self.live


@dataclass
class BenchEntry:
    bid: str
    path: Path
    rel: str
    meta: dict  # bench.json
    records: list[dict]  # results.jsonl, one per sample (the last)
    summary: Optional[dict]  # summary.json
    live: bool
    summary_stale: bool  # results were added after summary.json was written
    samples: list[RunEntry] = field(default_factory=list)
    sample_model: Optional[str] = None  # the model a sample's trajectory names (the default model has no name
    # in bench.json, and summary.json comes at the end)

    @property
    def task(self) -> str:
        return str(self.meta.get("task", {}).get("name") or (self.summary or {}).get("task") or "?")

    @property
    def model(self) -> Optional[str]:
        return ((self.meta.get("config", {}).get("run") or {}).get("model") or (self.summary or {}).get("model")
                or self.sample_model)


class _Results:
    """results.jsonl read incrementally: appended lines are parsed once; a rewrite (new inode) or a shrink
    reads it again."""

    def __init__(self, path: Path):
        self.path, self.ino, self.offset, self.records = path, None, 0, {}

    def load(self) -> dict[str, dict]:
        """The records by their trajectory's folder (relative to the benchmark), the last one of each sample."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.ino, self.offset, self.records = None, 0, {}
            return self.records
        if st.st_ino != self.ino or st.st_size < self.offset:
            self.ino, self.offset, self.records = st.st_ino, 0, {}
        if st.st_size > self.offset:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read(st.st_size - self.offset)
            whole = chunk[:chunk.rfind(b"\n") + 1]  # a line still being written waits for the next read
            self.offset += len(whole)
            for line in whole.decode("utf-8", errors="replace").splitlines():
                try:
                    rec = json.loads(line)
                    key = str(Path(rec.get("trajectory") or "").parent) if rec.get("trajectory") else \
                        str(layout.sample_dir(rec["id"], rec["mode"], rec["repeat"]))
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue
                self.records.pop(key, None)  # keep the file's order: a replaced record moves to the end
                self.records[key] = rec
        return self.records


class Index:
    """The runs and benchmarks under `root` (itself a run, a benchmark, or a folder of many)."""

    def __init__(self, root: Path, min_interval_s: float = 1.0):
        self.root = Path(root).resolve()
        self.min_interval_s = min_interval_s
        self._lock = threading.Lock()
        self._dirs: dict[str, tuple[int, list[str], set[str]]] = {}  # folder -> (mtime, subfolders, file names)
        self._entries: dict[str, tuple[tuple, Optional[dict], RunEntry]] = {}  # run folder -> (stamp, record, entry)
        self._results: dict[str, _Results] = {}
        self._models: dict[str, Optional[str]] = {}  # benchmark folder -> the model its first sample names
        self._parsed: dict[str, tuple[tuple, Optional[dict]]] = {}  # bench.json/summary.json -> (stamp, value)
        self._trainings: dict[str, tuple[tuple, TrainEntry]] = {}  # training folder -> (its files' stamps, entry)
        self._scanned_at = 0.0
        self.runs: list[RunEntry] = []
        self.benches: list[BenchEntry] = []
        self.by_rid: dict[str, RunEntry] = {}
        self.by_bid: dict[str, BenchEntry] = {}
        self.trainings: list[TrainEntry] = []
        self.by_tid: dict[str, TrainEntry] = {}
        self.version = 0  # goes up whenever what the index holds changed
        self._signature: Optional[int] = None

    # ------------------------------------------------------------------ the walk
    def _listing(self, d: str) -> tuple[list[str], set[str]]:
        st = os.stat(d)
        hit = self._dirs.get(d)
        if hit and hit[0] == st.st_mtime_ns:
            return hit[1], hit[2]
        subdirs, names = [], set()
        with os.scandir(d) as it:
            for e in it:
                try:
                    if e.is_dir(follow_symlinks=False):
                        subdirs.append(e.name)
                    else:
                        names.add(e.name)
                except OSError:
                    continue
        subdirs.sort()
        self._dirs[d] = (st.st_mtime_ns, subdirs, names)
        return subdirs, names

    def _walk(self, d: str, depth: int, found_runs: list[str], found_benches: list[str], in_bench: bool,
              found_trainings: Optional[list[str]] = None) -> None:
        try:
            subdirs, names = self._listing(d)
        except OSError:
            return
        is_run, is_bench = TRAJECTORY in names, BENCH in names or RESULTS in names
        if is_run:
            found_runs.append(d)
        if is_bench:
            found_benches.append(d)
        if not is_run and not is_bench and found_trainings is not None and is_training(names, subdirs):
            found_trainings.append(d)
            return
        if depth >= MAX_DEPTH:
            return
        for s in subdirs:
            if s.startswith(".") or s in SKIP_ANYWHERE or (is_run and s in SKIP_IN_RUN):
                continue
            if is_bench and s != layout.SAMPLES:
                continue
            self._walk(os.path.join(d, s), depth + 1, found_runs, found_benches, in_bench or is_bench,
                       found_trainings)

    def _rel(self, d: str) -> str:
        rel = os.path.relpath(d, self.root)
        return "." if rel == "." else rel.replace(os.sep, "/")

    def scan(self, force: bool = False) -> Index:
        """Bring the index up to date (at most once per min_interval_s unless forced)."""
        with self._lock:
            now = time.time()
            if not force and now - self._scanned_at < self.min_interval_s:
                return self
            run_dirs, bench_dirs, train_dirs = [], [], []
            self._walk(str(self.root), 0, run_dirs, bench_dirs, False, train_dirs)
            benches = [self._bench(d, now) for d in bench_dirs]
            bench_of = {str(b.path): b for b in benches}
            runs = []
            for d in run_dirs:
                entry = self._run(d, now, bench_of)
                if entry is not None:
                    runs.append(entry)
            runs.sort(key=lambda r: (r.started or 0.0), reverse=True)
            for gone in set(self._entries) - set(run_dirs):
                del self._entries[gone]
            self.runs, self.benches = runs, benches
            self.by_rid = {r.rid: r for r in runs}
            self.by_bid = {b.bid: b for b in benches}
            self.trainings = [self._training(d, now) for d in train_dirs]
            for gone in set(self._trainings) - set(train_dirs):
                del self._trainings[gone]
            self.by_tid = {t.tid: t for t in self.trainings}
            signature = hash((tuple((r.rid, r.exit_reason, r.steps, r.live, r.score) for r in runs),
                              tuple((b.bid, len(b.records), b.live) for b in benches),
                              tuple((t.tid, t.steps, t.finished, t.live) for t in self.trainings)))
            if signature != self._signature:
                self._signature = signature
                self.version += 1
            self._scanned_at = time.time()
            return self

    # ------------------------------------------------------------------ trainings
    def _training(self, d: str, now: float) -> TrainEntry:
        """The training in folder d: its files read again only when one of them changed."""
        stamps = tuple(stamp_of(Path(d), name) for name in (METRICS, CONFIG, TRAIN_SUMMARY))
        hit = self._trainings.get(d)
        if hit is not None and hit[0] == stamps:
            entry = hit[1]
        else:
            rel = self._rel(d)
            entry = describe(TrainEntry(tid=folder_id(rel), path=Path(d), rel=rel), read_yaml_config(Path(d)),
                             read_metrics(Path(d)), read_summary_json(Path(d)) is not None)
            self._trainings[d] = (stamps, entry)
        latest = max((_mtime(Path(d) / n) or 0.0 for n in (METRICS, ROLLOUTS)), default=0.0)
        entry.live = not entry.finished and now - latest < STALE_S
        return entry

    # ------------------------------------------------------------------ benchmarks
    def _bench(self, d: str, now: float) -> BenchEntry:
        rel = self._rel(d)
        results = self._results.setdefault(d, _Results(Path(d) / RESULTS))
        records = results.load()
        meta = self._json(Path(d) / BENCH) or {}
        summary = self._json(Path(d) / SUMMARY)
        res_m, sum_m = _mtime(Path(d) / RESULTS), _mtime(Path(d) / SUMMARY)
        stale = summary is None or (res_m is not None and sum_m is not None and res_m > sum_m)
        latest = max((m for m in (res_m, _mtime(Path(d) / BENCH)) if m is not None), default=0.0)
        live = stale and now - latest < STALE_S
        return BenchEntry(bid=folder_id(rel), path=Path(d), rel=rel, meta=meta, records=list(records.values()),
                          summary=summary, live=live, summary_stale=stale, sample_model=self._sample_model(d, records))

    def _json(self, path: Path) -> Optional[dict]:
        """bench.json or summary.json, parsed again only when it changed (every scan asks)."""
        try:
            st = os.stat(path)
        except OSError:
            self._parsed.pop(str(path), None)
            return None
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        hit = self._parsed.get(str(path))
        if hit is None or hit[0] != stamp:
            hit = self._parsed[str(path)] = (stamp, _read_json(path))
        return hit[1]

    def _sample_model(self, d: str, records: dict[str, dict]) -> Optional[str]:
        """The model named in the first finished sample's trajectory, read once per benchmark."""
        if d not in self._models and records:
            first = next(iter(records.values()))
            try:
                self._models[d] = (read_summary(Path(d) / first["trajectory"]).get("config") or {}).get("model")
            except (OSError, ValueError, KeyError, TypeError):
                self._models[d] = None
        return self._models.get(d)

    # ------------------------------------------------------------------ runs
    def _run(self, d: str, now: float, bench_of: dict[str, BenchEntry]) -> Optional[RunEntry]:
        """The run in folder d: rebuilt only when its record or its trajectory.json changed."""
        bench = _bench_above(d, bench_of)
        rec = None
        if bench is not None:
            rec = self._results[str(bench.path)].records.get(d[len(str(bench.path)) + 1:].replace(os.sep, "/"))
        if rec is not None:
            stamp: tuple = ("record", id(rec))
            mtime = None
        else:
            try:
                st = os.stat(os.path.join(d, TRAJECTORY))
            except OSError:
                return None
            stamp, mtime = ("trajectory", st.st_mtime_ns, st.st_size), st.st_mtime
        hit = self._entries.get(d)
        if hit is not None and hit[0] == stamp and hit[1] is rec:
            entry = hit[2]
        else:
            entry = self._record_entry(d, bench, rec) if rec is not None else self._trajectory_entry(d, bench)
            if entry is None:
                return None
            self._entries[d] = (stamp, rec, entry)
        if mtime is not None:
            entry.live = entry.exit_reason is None and now - mtime < STALE_S
        if bench is not None:
            bench.samples.append(entry)
        return entry

    def _record_entry(self, d: str, bench: BenchEntry, rec: dict) -> RunEntry:
        rel = self._rel(d)
        return RunEntry(rid=folder_id(rel), path=Path(d), rel=rel, task=str(rec.get("task") or bench.task),
                        item=str(rec.get("id")), mode=rec.get("mode") or "?", repeat=rec.get("repeat"),
                        bench=bench.bid, score=rec.get("score"), exit_reason=rec.get("exit_reason"),
                        error=rec.get("error"), model=bench.model, steps=int(rec.get("steps") or 0),
                        tokens=int(rec.get("billed_tokens") or 0), wall_s=rec.get("wall_time_s"),
                        cost=rec.get("cost_usd"), started=rec.get("started_at"))

    def _trajectory_entry(self, d: str, bench: Optional[BenchEntry]) -> Optional[RunEntry]:
        rel = self._rel(d)
        try:
            summary = read_summary(Path(d) / TRAJECTORY)
        except FileNotFoundError:
            return None  # gone since the folder was listed
        except (OSError, ValueError) as e:  # runs write it atomically: this one is damaged, say so
            return RunEntry(rid=folder_id(rel), path=Path(d), rel=rel, task="run", item=rel, mode="sandbox",
                            exit_reason=UNREADABLE, error=f"trajectory.json cannot be read: {e}"[:300],
                            started=_mtime(Path(d) / TRAJECTORY))
        totals = summary.get("totals") or {}
        task = summary.get("task") or {}
        config = summary.get("config") or {}
        entry = RunEntry(rid=folder_id(rel), path=Path(d), rel=rel, task="run",
                         item=str(task.get("id") or summary.get("run_id") or rel),
                         mode=summary.get("mode") or "sandbox", exit_reason=summary.get("exit_reason"),
                         model=config.get("model"), steps=int(totals.get("steps") or 0),
                         tokens=int(totals.get("total_tokens") or 0), wall_s=totals.get("wall_time_s"),
                         cost=totals.get("cost_usd"),
                         started=_unix(summary.get("created_at")) or _mtime(Path(d) / TRAJECTORY))
        if bench is not None:  # a sample still running (or cut off): no record yet
            parts = os.path.relpath(d, bench.path).split(os.sep)
            entry.task, entry.bench, entry.model = bench.task, bench.bid, entry.model or bench.model
            if len(parts) == 4:
                entry.mode, entry.item = parts[1], str(task.get("id") or parts[2])
                entry.repeat = int(parts[3][1:]) if parts[3][1:].isdigit() else None
        return entry


def _bench_above(d: str, bench_of: dict[str, BenchEntry]) -> Optional[BenchEntry]:
    for _ in range(4):  # samples/<mode>/<id>/r<k>: the benchmark is four levels up
        d = os.path.dirname(d)
        if d in bench_of:
            return bench_of[d]
    return None


def _mtime(path: Path) -> Optional[float]:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _read_json(path: Path) -> Optional[dict]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _unix(iso: Optional[str]) -> Optional[float]:
    if not iso:
        return None
    from datetime import datetime

    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None
