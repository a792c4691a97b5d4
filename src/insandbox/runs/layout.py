"""Every path of a run folder and of a benchmark folder, named here once.

A run folder (`insandbox run`, a benchmark sample, a fork's branch):

    trajectory.json      rewritten after every step (through trajectory.json.tmp)
    answer.txt           the model's answer, when it wrote one
    files/               the sandbox's output folder, copied back
    inputs/              the in-memory input files, as the sandbox got them (for replay and fork)
    forks/step-<k>/branch-<i>/   the branches of `insandbox fork` (each a run folder)

A benchmark folder (`insandbox bench`):

    bench.json           its settings, rows and task, written once
    results.jsonl        one record per sample, appended as each is scored
    summary.json         rewritten at the end of each session
    report/              `insandbox report`'s tables and pages
    samples/<mode>/<id>/r<k>/   each sample's run folder (<id> made safe as a file name)
"""
from __future__ import annotations

import datetime as _dt
import re
import uuid
from pathlib import Path

# ---------------------------------------------------------------------- a run folder
TRAJECTORY = "trajectory.json"
TRAJECTORY_TMP = "trajectory.json.tmp"  # core.trajectory's save writes here, then renames
ANSWER = "answer.txt"
FILES = "files"
INPUTS = "inputs"
FORKS = "forks"
RUN_FILES = (TRAJECTORY, TRAJECTORY_TMP, ANSWER, FILES, INPUTS)  # what a run writes in its folder

# ---------------------------------------------------------------------- a benchmark folder
BENCH = "bench.json"
RESULTS = "results.jsonl"
SUMMARY = "summary.json"
REPORT = "report"
SAMPLES = "samples"


def safe_name(text: str) -> str:
    """`text` as one file name: anything but letters, digits and ._- becomes _, at most 120 characters."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:120] or "_"


def sample_dir(row_id: str, mode: str, repeat: int) -> Path:
    """A sample's run folder, relative to its benchmark folder."""
    return Path(SAMPLES) / mode / safe_name(str(row_id)) / f"r{repeat}"


def sample_trajectory(row_id: str, mode: str, repeat: int) -> str:
    """What a sample's record names as its trajectory (relative to the benchmark folder)."""
    return str(sample_dir(row_id, mode, repeat) / TRAJECTORY)


def bench_of_sample(run_dir: Path) -> Path | None:
    """The benchmark folder a sample's run folder (<bench>/samples/<mode>/<id>/r<k>) belongs to, else None."""
    run_dir = Path(run_dir)
    if len(run_dir.parents) > 3 and run_dir.parents[2].name == SAMPLES:
        return run_dir.parents[3]
    return None


def fork_branch(step: int, branch: int, into_run: bool = True) -> str:
    """A fork's branch folder: under the forked run (forks/step-<k>/branch-<i>), or right in a folder the
    user named (branch-<i>)."""
    return (f"{FORKS}/step-{step}/" if into_run else "") + f"branch-{branch}"


def _stamp() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def default_run_dir(root: Path, run_id: str) -> Path:
    """Where a run goes when no --out is given: <root>/<date-time>-<run id>."""
    return Path(root) / f"{_stamp()}-{run_id}"


def default_bench_dir(root: Path, task: str) -> Path:
    """Where a benchmark goes when no --out is given: <root>/bench-<task>-<date-time>-<random>."""
    return Path(root) / f"bench-{safe_name(Path(task).stem)}-{_stamp()}-{uuid.uuid4().hex[:6]}"
