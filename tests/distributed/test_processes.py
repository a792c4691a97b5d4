"""`insandbox bench --processes N`: samples in worker processes on this machine, streamed back into the
driver's run folder; a worker killed mid-run, Ctrl-C, refusals, and a hostile run folder."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from insandbox.bench.runner import BenchAborted
from insandbox.distributed.bench import run_bench
from insandbox.sandbox.docker import LABEL, LABEL_OWNER, engine
from tests.distributed.test_bench import Recorder, _answer, _bench, _lines
from tests.helpers import cli


def _workers() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if "insandbox.distributed.process_worker" in " ".join(proc.info["cmdline"] or []):
            found.append(proc)
    return found


def _containers_of(pids: set[int]) -> list[dict]:
    out = []
    for c in engine.api().containers(all=True, filters={"label": f"{LABEL}=1"}):
        owner = (c.get("Labels") or {}).get(LABEL_OWNER, "").split(":")
        if len(owner) > 1 and owner[1].isdigit() and int(owner[1]) in pids:
            out.append(c)
    return out


class Watch(Recorder):
    """Records as Recorder does, and notes the worker processes' pids while the run goes."""

    def __init__(self, run_dir: Path, on_first=None):
        super().__init__(run_dir, on_first)
        self.pids: set[int] = set()

    def on_sample(self, record: dict) -> None:
        self.pids |= {p.pid for p in _workers()}
        super().on_sample(record)


@pytest.mark.docker
def test_samples_run_in_worker_processes_and_stream_back_into_the_run_folder(scripted, run_async, tmp_path):
    srv = scripted({"turns": _answer(steps=1, latency=0.2)})
    cfg = _bench(tmp_path, [f"s{i}" for i in range(6)], srv.url, concurrency=4)
    progress = Watch(cfg.output_dir)
    result = run_async(run_bench(cfg, progress, processes=2))
    recs = result.records
    assert len(recs) == 6 and all(r["score"] == 1.0 and r["error"] is None for r in recs), recs
    assert {r["node"] for r in recs} == {"process 0", "process 1"}  # both workers ran samples
    assert len(progress.pids) == 2 and os.getpid() not in progress.pids
    assert [n for _, n, _ in progress.seen] == [1, 2, 3, 4, 5, 6]  # each appended as it finished
    assert all(there for _, _, there in progress.seen)  # its folder already in place
    for r in recs:
        folder = cfg.output_dir / Path(r["trajectory"]).parent
        assert (folder / "answer.txt").read_text() == "done"
        assert (folder / "files" / "step0.txt").read_text().strip() == "0"
        assert json.loads((folder / "trajectory.json").read_text())["exit_reason"] == "submitted"
    assert result.summary["samples"] == 6 and result.summary["errors"] == 0
    assert any("2 worker processes, up to 2 samples each" in s for s in progress.status)
    # the summary counts what the workers' pools did, as one pool: 6 samples had a sandbox each
    session = json.loads((cfg.output_dir / "summary.json").read_text())["session"]
    pool = session["sandbox_pool"]
    assert session["processes"] == 2 and session["engine_outages"] == []
    assert pool["warm_hits"] + pool["waited"] == 6 and pool["started"] >= 2
    assert pool["started"] + pool["recycled"] >= 6 and pool["acquire_p50_s"] is not None
    # nothing left: the workers, their scratch folders, their sandboxes
    assert not (cfg.output_dir / ".workers").exists()
    assert not any(psutil.pid_exists(p) for p in progress.pids)
    assert _containers_of(progress.pids) == []


@pytest.mark.docker
def test_a_killed_worker_stops_the_run_and_resume_finishes_it(scripted, run_async, tmp_path):
    srv = scripted({"scripts": [{"match": "Probe quick.", "turns": _answer()},
                                {"match": "Probe", "turns": _answer(steps=4, latency=0.5)}]})
    ids = ["quick", *(f"slow{i}" for i in range(5))]
    cfg = _bench(tmp_path, ids, srv.url, concurrency=6)
    killed: set[int] = set()

    def kill_one() -> None:
        victim = _workers()[0]
        killed.add(victim.pid)
        victim.kill()

    progress = Watch(cfg.output_dir, on_first=kill_one)
    try:
        with pytest.raises(BenchAborted, match=r"worker process \d \(pid \d+\) ended with exit code -9 while it ran "
                                               r"samples\. Every sample recorded so far is kept; finish the run "
                                               r"with: insandbox bench --resume "):
            run_async(run_bench(cfg, progress, processes=2))
        assert not any(psutil.pid_exists(p) for p in progress.pids)  # the other worker closed too
        assert _containers_of(progress.pids - killed) == []  # and removed its sandboxes
    finally:  # a SIGKILLed worker cannot remove its own (`insandbox clean` does, as after any SIGKILL)
        for c in _containers_of(killed):
            engine.api().remove_container(c["Id"], force=True, v=True)
    recorded = [x["id"] for x in _lines(cfg.output_dir)]
    assert "quick" in recorded and len(recorded) < len(ids)
    r = cli("bench", "--resume", str(cfg.output_dir), "--processes", "2", "-q")
    assert r.returncode == 0, r.stderr
    lines = _lines(cfg.output_dir)
    assert sorted(x["id"] for x in lines) == sorted(ids)  # one record each
    assert all(x["score"] == 1.0 and x["error"] is None for x in lines), lines


@pytest.mark.docker
def test_ctrl_c_stops_the_workers_and_removes_their_sandboxes(scripted, tmp_path):
    srv = scripted({"turns": _answer(steps=20, latency=0.3)})
    cfg = _bench(tmp_path, [f"s{i}" for i in range(4)], srv.url, concurrency=4)
    cmd = [sys.executable, "-m", "insandbox", "bench", str(tmp_path / "probe.yaml"), "--data", str(cfg.data),
           "--model", "scripted", "--base-url", srv.url, "--out", str(cfg.output_dir), "--processes", "2",
           "--concurrency", "4", "--max-steps", "30", "-q"]
    driver = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids: set[int] = set()
    deadline = time.time() + 120
    while time.time() < deadline and len(srv.requests) < 12:  # every sample well under way
        time.sleep(0.2)
        pids |= {p.pid for p in _workers() if p.ppid() == driver.pid}
    assert len(pids) == 2 and _containers_of(pids), "the workers and their sandboxes were up"
    os.killpg(driver.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole foreground group
    out, err = driver.communicate(timeout=120)
    assert driver.returncode != 0
    assert not any(psutil.pid_exists(p) for p in pids)
    assert _containers_of(pids) == []
    assert not (cfg.output_dir / ".workers").exists()


def test_processes_refuse_ray_the_embedded_model_and_less_than_one(tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "a", "problem_statement": "x", "ground_truth": "y"}) + "\n")
    out = tmp_path / "run"
    server = ["--model", "m", "--base-url", "http://127.0.0.1:9/v1"]
    r = cli("bench", "math", "--data", str(data), "--processes", "2", "--out", str(out), "-q",
            env={"INSANDBOX_MODEL": "", "INSANDBOX_BASE_URL": ""})
    assert r.returncode == 2 and "--processes needs a model server (--model and --base-url)" in r.stderr
    r = cli("bench", "math", "--data", str(data), *server, "--processes", "2", "--ray", "auto",
            "--out", str(out), "-q")
    assert r.returncode == 2 and "--processes and --ray: choose one" in r.stderr
    r = cli("bench", "math", "--data", str(data), *server, "--processes", "0", "--out", str(out), "-q")
    assert r.returncode == 2 and "--processes" in r.stderr
    assert not out.exists()  # nothing was created


@pytest.mark.docker
def test_a_run_folder_with_links_gets_nothing_written_through_them(scripted, run_async, tmp_path):
    srv = scripted({"turns": _answer()})
    cfg = _bench(tmp_path, ["a", "b"], srv.url, concurrency=2)
    run_async(run_bench(cfg, processes=2))
    run_dir = cfg.output_dir
    # someone else's copy of the run folder: "b" to run again, its folder and the workers' a link each
    kept = [r for r in _lines(run_dir) if r["id"] != "b"]
    (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    host, host_workers = tmp_path / "host", tmp_path / "host_workers"
    host.mkdir()
    host_workers.mkdir()
    (host_workers / "keep.txt").write_text("mine")
    sample = run_dir / Path(next(r for r in _lines(run_dir) if r["id"] == "a")["trajectory"]).parents[2] / "b"
    shutil.rmtree(sample)
    sample.symlink_to(host, target_is_directory=True)
    (run_dir / ".workers").symlink_to(host_workers, target_is_directory=True)
    r = cli("bench", "--resume", str(run_dir), "--processes", "2", "-q")
    assert r.returncode != 0 and "symbolic link" in r.stderr, r.stderr
    assert list(host.iterdir()) == []  # nothing went through the sample's link
    assert [p.name for p in host_workers.iterdir()] == ["keep.txt"]  # the workers' link was removed, not followed
    assert (host_workers / "keep.txt").read_text() == "mine"
    assert not (run_dir / ".workers").is_symlink()


def test_what_crosses_between_the_processes(tmp_path):
    from insandbox.distributed.processes import _fresh_folder, _move, portable

    class Odd(Exception):
        def __init__(self, a, b):  # pickles, but cannot be made again from its args
            super().__init__(f"{a}{b}")

    kept = portable(ValueError("plain"))
    assert isinstance(kept, ValueError) and str(kept) == "plain"
    said = portable(Odd(1, 2))
    assert type(said) is RuntimeError and str(said) == "Odd: 12"
    # the workers' folder: a link there is removed, never followed
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    run = tmp_path / "run"
    run.mkdir()
    (run / ".workers").symlink_to(outside, target_is_directory=True)
    _fresh_folder(run / ".workers")
    assert (run / ".workers").is_dir() and not (run / ".workers").is_symlink()
    assert (outside / "keep").read_text() == "x"
    # a sample's folder moves into place over an old one, and never through a link on the way
    src = tmp_path / "w" / "r0"
    src.mkdir(parents=True)
    (src / "trajectory.json").write_text("new")
    (run / "samples" / "sandbox" / "a" / "r0").mkdir(parents=True)
    (run / "samples" / "sandbox" / "a" / "r0" / "trajectory.json").write_text("old")
    _move(src, run, Path("samples/sandbox/a/r0"))
    assert (run / "samples/sandbox/a/r0/trajectory.json").read_text() == "new" and not src.exists()
    (run / "samples" / "sandbox" / "b").symlink_to(outside, target_is_directory=True)
    src.mkdir()
    with pytest.raises(OSError, match="symbolic link"):
        _move(src, run, Path("samples/sandbox/b/r0"))
    assert sorted(p.name for p in outside.iterdir()) == ["keep"]
    _move(tmp_path / "never-written", run, Path("samples/sandbox/c/r0"))  # a sample that wrote nothing
    assert not (run / "samples/sandbox/c").exists()
