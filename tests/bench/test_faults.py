"""The benchmark runner under host faults: the results disk fills, the process is killed or
signalled half way, the Docker daemon restarts. Real containers, real HTTP to the scripted model."""
from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from insandbox.bench.runner import BenchConfig, EngineOutage, RunFolderUnwritable, run_bench
from insandbox.config import RunConfig
from tests.helpers import cli, containers_with_label, owner_of

N_ROWS = 6


def _rows(path: Path, n: int = N_ROWS) -> Path:
    path.write_text("".join(json.dumps({"id": f"q{i}", "problem_statement": f"Question {i}?\nA. yes\nB. no",
                                        "ground_truth": "A"}) + "\n" for i in range(n)))
    return path


def _script(sleep: float = 0.0) -> dict:
    """Two tool calls (the second sleeps, so a sample takes a while), then submit (sandbox mode); a plain
    answer (plain mode)."""
    return {"turns": [
        {"tool": "execute_bash", "args": {"command": "echo A > /testbed/answer.txt"}},
        {"tool": "execute_bash", "args": {"command": f"sleep {sleep}; cat /testbed/answer.txt"}},
        {"tool": "submit"}], "llm_turns": [{"content": "Answer: A"}]}


def _results(run_dir: Path) -> list[dict]:
    """results.jsonl, checked whole: every line a record, the file ending in a newline."""
    raw = (run_dir / "results.jsonl").read_text()
    assert raw.endswith("\n"), raw[-200:]
    return [json.loads(line) for line in raw.splitlines()]


def _one_per_sample(run_dir: Path, n: int = N_ROWS) -> list[dict]:
    recs = _results(run_dir)
    keys = [(r["id"], r["mode"], r["repeat"]) for r in recs]
    assert len(keys) == len(set(keys)) == n, keys
    bad = [(r["id"], r["error"], r.get("score")) for r in recs if r["error"] is not None or r.get("score") != 1.0]
    assert bad == [] and all(r["attempts"] >= 1 for r in recs), bad
    return recs


def _bench_args(data: Path, url: str, image: str, run_dir: Path, concurrency: int = 2) -> list[str]:
    exe = Path(sys.executable).parent / "insandbox"
    return [str(exe), "bench", "chem", "--data", str(data), "--model", "m", "--base-url", url, "--image", image,
            "--network", "none", "--concurrency", str(concurrency), "--out", str(run_dir), "-q"]


def _wait_for_records(proc: subprocess.Popen, run_dir: Path, n: int, deadline_s: float = 300) -> None:
    results = run_dir / "results.jsonl"
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if results.is_file() and len(results.read_text().splitlines()) >= n:
            return
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"no {n} records while the bench ran (exit status {proc.poll()})")


def _containers_of_trajectories(run_dir: Path) -> set[str]:
    ids = set()
    for path in run_dir.glob("samples/*/*/*/trajectory.json"):
        cid = json.loads(path.read_text()).get("sandbox", {}).get("container_id")
        if cid:
            ids.add(cid)
    return ids


def _states(label: str) -> list[str]:
    """`name state` of the containers with this label (none: all removed)."""
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}} {{.Status}}"],
                         capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def _existing(ids: set[str]) -> set[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--no-trunc"], capture_output=True, text=True, check=True)
    return ids & set(out.stdout.split())


# ---------------------------------------------------------------------- the results disk fills
@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs, unmounted afterwards."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(folder: Path) -> Path:
    """Write a file until the device is full (no page left for a new file)."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (65536, 4096, 1):
            while True:
                try:
                    os.write(fd, b"x" * size)
                except OSError as e:
                    assert e.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)
    return filler


class _FillAfter:
    """Bench progress that fills the disk once `n` samples are recorded."""

    def __init__(self, folder: Path, n: int):
        self.folder, self.n, self.seen, self.filler = folder, n, 0, None

    def on_status(self, text): pass

    def on_progress(self, text): pass

    def on_start(self, total, already_done, run_dir, concurrency): pass

    def on_sample_start(self, row_id, mode, repeat): pass

    def on_sample(self, record):
        self.seen += 1
        if self.seen == self.n:
            self.filler = _fill(self.folder)


def test_a_full_results_disk_stops_the_run_keeps_the_results_whole_and_resume_finishes(
        small_disk, scripted, run_async, tmp_path, docker_image):
    srv = scripted(_script())
    data = _rows(tmp_path / "rows.jsonl")
    run_dir = small_disk / "run"
    cfg = BenchConfig(task="chem", data=data, concurrency=1, output_dir=run_dir,
                      run=RunConfig(model="m", base_url=srv.url, image=docker_image, network="none"))
    progress = _FillAfter(small_disk, 2)
    with pytest.raises(RunFolderUnwritable) as stop:
        run_async(run_bench(cfg, progress))
    message = str(stop.value)
    assert "No space left on device" in message and str(run_dir) in message  # what and where
    assert f"insandbox bench --resume {run_dir}" in message  # how to go on
    before = _results(run_dir)  # whole: every line a record, no half line
    assert len(before) >= 2 and all(r["error"] is None for r in before)
    assert not list(run_dir.glob("*.part")) and not list(run_dir.glob("*.tmp"))
    assert containers_with_label(owner_of(os.getpid())) == []  # the cut-off sample's sandbox is removed

    r = cli("bench", "--resume", str(run_dir), "-q")  # still full: the same clear stop, from the command
    assert r.returncode == 1 and "No space left on device" in r.stderr and "--resume" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert _results(run_dir) == before

    progress.filler.unlink()  # space again
    r = cli("bench", "--resume", str(run_dir), "-q")
    assert r.returncode == 0, r.stderr
    after = _one_per_sample(run_dir)
    assert [x for x in after if x["id"] in {b["id"] for b in before}] == before  # kept as they were
    assert json.loads((run_dir / "summary.json").read_text())["samples"] == N_ROWS


def test_a_full_disk_at_the_start_is_the_same_clear_stop(small_disk, scripted, tmp_path, docker_image):
    srv = scripted(_script())
    data = _rows(tmp_path / "rows.jsonl")
    _fill(small_disk)
    run_dir = small_disk / "run"
    r = cli(*_bench_args(data, srv.url, docker_image, run_dir)[1:])
    assert r.returncode == 1 and "No space left on device" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert f"--resume {run_dir}" in r.stderr
    assert not srv.requests  # nothing ran


# ---------------------------------------------------------------------- killed, signalled
def test_sigkill_half_way_then_resume_records_each_sample_once_and_leaves_no_container(
        scripted, tmp_path, docker_image):
    srv = scripted(_script(sleep=1))
    data = _rows(tmp_path / "rows.jsonl")
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(_bench_args(data, srv.url, docker_image, run_dir), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        _wait_for_records(proc, run_dir, 2)
        owner = owner_of(proc.pid)
    finally:
        proc.send_signal(signal.SIGKILL)  # no chance to clean up
        proc.wait()
    before = _results(run_dir)
    assert 2 <= len(before) < N_ROWS
    # what the product guarantees: the sandboxes of a killed process stop by themselves (their
    # attach stream closes), and `insandbox clean` removes them
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        running = subprocess.run(["docker", "ps", "-q", "--filter", f"label={owner}"], capture_output=True,
                                 text=True).stdout.split()
        if not running:
            break
        time.sleep(0.2)
    assert not running, "the killed run's sandboxes kept running"
    r = cli("clean")  # (another `insandbox clean` on this machine may have been first)
    assert r.returncode == 0, r.stderr
    assert containers_with_label(owner) == []

    r = cli("bench", "--resume", str(run_dir), "-q")
    assert r.returncode == 0, r.stderr
    after = _one_per_sample(run_dir)
    kept = {x["id"]: x for x in after}
    assert all(kept[b["id"]] == b for b in before)  # the recorded samples were not run again
    cut_off = [x for x in after if x["id"] not in {b["id"] for b in before}]
    assert any(x.get("resumed_attempts") == 1 and x["attempts"] == 2 for x in cut_off), cut_off  # counted
    assert _existing(_containers_of_trajectories(run_dir)) == set()


def test_sigterm_then_sigint_stop_the_bench_cleanly_and_resume_finishes(scripted, tmp_path, docker_image):
    n = 8
    srv = scripted(_script(sleep=1))
    data = _rows(tmp_path / "rows.jsonl", n)
    run_dir = tmp_path / "run"
    first = _bench_args(data, srv.url, docker_image, run_dir)
    seen = 0
    for sig, args in ((signal.SIGTERM, first), (signal.SIGINT, first[:2] + ["--resume", str(run_dir), "-q"])):
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _wait_for_records(proc, run_dir, seen + 1)
            owner = owner_of(proc.pid)
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 128 + sig, err
        assert f"{sig.name}: stopping" in err and "Traceback" not in err
        recs = _results(run_dir)  # whole
        assert seen < len(recs) < n and all(r["error"] is None for r in recs)
        assert _states(owner) == [], (sig, err)  # removed before it exited
        assert json.loads((run_dir / "summary.json").read_text())["samples"] == len(recs)
        seen = len(recs)
    r = cli("bench", "--resume", str(run_dir), "-q")
    assert r.returncode == 0, r.stderr
    _one_per_sample(run_dir, n)
    assert _existing(_containers_of_trajectories(run_dir)) == set()


# ---------------------------------------------------------------------- the Docker daemon restarts
RESTART_LOCK = Path("/tmp/insandbox-dockerd-restart.lock")  # other Docker work on this machine waits while it exists


def _dockerd() -> tuple[int, list[str]]:
    """The pid and argv of the dockerd serving the default socket (its pid file, else the one
    dockerd that names no other socket)."""
    pidfile = Path("/var/run/docker.pid")
    if pidfile.is_file():
        pid = int(pidfile.read_text().strip() or 0)
        if pid and Path(f"/proc/{pid}/comm").is_file() and Path(f"/proc/{pid}/comm").read_text().strip() == "dockerd":
            return pid, Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "comm").read_text().strip() == "dockerd":
                argv = (proc / "cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
                if not any(a in ("-H", "--host") or a.startswith(("-H=", "--host=")) for a in argv):
                    return int(proc.name), argv
        except OSError:
            continue
    raise AssertionError("no dockerd serving the default socket")


def _engine_answers() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0


def _wait(check, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {seconds:.0f} s")
        time.sleep(0.2)


def _restart_dockerd() -> None:
    """SIGTERM the daemon, wait until it is gone, start it again with the same arguments (in the
    background, its log appended to /var/log/insandbox-dockerd.log), wait until it answers. Under
    RESTART_LOCK; whatever happens, a daemon is running again at the end."""
    deadline = time.monotonic() + 600
    while True:  # another restart in progress: wait for it
        try:
            fd = os.open(RESTART_LOCK, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            break
        except FileExistsError:
            assert time.monotonic() < deadline, f"{RESTART_LOCK} held for 10 minutes"
            time.sleep(1)
    os.write(fd, f"{os.getpid()} tests/bench/test_faults.py\n".encode())
    os.close(fd)
    pid, argv = _dockerd()
    try:
        os.kill(pid, signal.SIGTERM)
        _wait(lambda: not Path(f"/proc/{pid}").exists(), 120, "dockerd did not stop")
    finally:
        try:
            if not _engine_answers():
                with open("/var/log/insandbox-dockerd.log", "ab") as log:
                    subprocess.Popen(["nohup", *argv], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
                _wait(_engine_answers, 120, "dockerd did not answer again")
        finally:
            RESTART_LOCK.unlink(missing_ok=True)


@pytest.mark.restarts_dockerd
def test_a_docker_daemon_restart_mid_bench_is_waited_out_and_the_run_completes(scripted, tmp_path, docker_image):
    """The samples the restart cuts off are recorded as infrastructure failures of their attempt
    (`failed_attempts`), run again once the engine is back without using up their retries, and the run
    finishes with every sample scored; the containers the restart left are removed by the run."""
    n = 8
    srv = scripted(_script(sleep=4))  # long enough for the restart to cut samples off (pooled sandboxes are quick)
    data = _rows(tmp_path / "rows.jsonl", n)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(_bench_args(data, srv.url, docker_image, run_dir), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_records(proc, run_dir, 2)
        owner = owner_of(proc.pid)
        _restart_dockerd()
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    recs = _one_per_sample(run_dir, n)
    cut = [r for r in recs if any(f.get("engine_away") for f in r.get("failed_attempts", []))]
    assert cut, recs  # the samples in flight were cut off, and recorded so
    for r in cut:
        assert r["attempts"] == len(r["failed_attempts"]) + 1 and "sandbox_error" in r["failed_attempts"][0]["error"]
    outages = json.loads((run_dir / "summary.json").read_text())["session"]["engine_outages"]
    # the restart's leftovers are gone, removed by the run: by the outage's sweep (`containers_removed`), or
    # by a sandbox's own close when that came after the engine was back (then the sweep finds none: CI saw 0)
    assert len(outages) == 1 and isinstance(outages[0]["containers_removed"], int), outages
    assert _states(owner) == []


class _EngineProxy:
    """A unix socket forwarding to the Docker engine's until `cut()`: from the client's side, the
    engine went away for good (connections dropped, nothing listening), while it runs on for others."""

    def __init__(self, path: Path, target: str = "/var/run/docker.sock"):
        self.path, self.target = path, target
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(path))
        self.listener.listen(64)
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            engine = socket.socket(socket.AF_UNIX)
            engine.connect(self.target)
            with self.lock:
                if self.closed:  # accepted just before the cut: dropped with the rest
                    client.close()
                    engine.close()
                    return
                self.conns += [client, engine]
            for a, b in ((client, engine), (engine, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
            b.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def cut(self) -> None:
        self.listener.close()
        self.path.unlink(missing_ok=True)
        with self.lock:
            self.closed = True
            for c in self.conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                    c.close()
                except OSError:
                    pass


class _CutAfter(_FillAfter):
    """Cuts the engine off after the n-th record, once another sample has asked the model (it is in its
    sandbox): a condition, not a clock, so a slow machine cuts at the same point."""

    def __init__(self, proxy: _EngineProxy, n: int, srv):
        self.proxy, self.n, self.seen, self.srv = proxy, n, 0, srv

    def on_sample(self, record):
        self.seen += 1
        if self.seen == self.n:
            asked = len(self.srv.requests)

            def cut_when_asked():
                while len(self.srv.requests) <= asked:
                    time.sleep(0.02)
                self.proxy.cut()
            threading.Thread(target=cut_when_asked, daemon=True).start()


def test_an_engine_that_does_not_come_back_stops_the_run_and_resume_finishes(
        scripted, run_async, tmp_path, docker_image, monkeypatch):
    """The wait for the engine is bounded (engine_wait_s): past it the samples it cut off are recorded
    as errors, the run stops with how to resume, and `--resume` with the engine back runs them again."""
    from insandbox.sandbox import docker as backend
    from insandbox.sandbox.docker import engine

    proxy = _EngineProxy(tmp_path / "engine.sock")
    srv = scripted(_script(sleep=1))
    data = _rows(tmp_path / "rows.jsonl")
    run_dir = tmp_path / "run"
    cfg = BenchConfig(task="chem", data=data, concurrency=2, engine_wait_s=2, output_dir=run_dir,
                      run=RunConfig(model="m", base_url=srv.url, image=docker_image, network="none"))
    with monkeypatch.context() as m:  # this process reaches the engine through the proxy only
        m.setattr(engine, "docker_host", lambda: f"unix://{proxy.path}")
        m.setattr(engine, "_api", None)
        try:
            with pytest.raises(EngineOutage) as stop:
                run_async(run_bench(cfg, _CutAfter(proxy, 1, srv)))
        finally:
            proxy.cut()
        left = dict(backend.UNREMOVED)  # the run's sandboxes it could not remove: the engine was away
    message = str(stop.value)
    assert "has not answered for" in message and f"insandbox bench --resume {run_dir}" in message
    recs = _results(run_dir)
    cut = [r for r in recs if r["error"]]
    assert cut and all("did not answer again within 2 s" in r["error"] for r in cut), recs
    assert all(r["failed_attempts"][-1].get("engine_away") for r in cut), cut
    # with the engine reachable again, the run's own clean-up removes what it could not (the owner, this
    # process, is alive, so `insandbox clean` would leave them alone)
    assert sorted(run_async(backend.DockerSandbox.remove_unremoved())) == sorted(left.values())
    assert _states(owner_of(os.getpid())) == []

    run_async(run_bench(cfg, resume=run_dir))
    after = _one_per_sample(run_dir)
    again = {r["id"]: r for r in after}
    assert all(again[r["id"]]["attempts"] == r["attempts"] + 1 for r in cut)  # earlier attempts counted


def test_resume_keeps_the_runs_own_concurrency(scripted, tmp_path):
    """Regression: `--resume` without --concurrency ran at the option's default (8), not at the run's own."""
    srv = scripted({"latency": 0.3, "llm_turns": [{"content": "Answer: A", "fail": {"status": 500, "times": 1}}]})
    data = _rows(tmp_path / "rows.jsonl")
    run_dir = tmp_path / "run"
    r = cli("bench", "chem", "--data", str(data), "--mode", "llm", "--model", "m", "--base-url", srv.url,
            "--concurrency", "2", "--retries", "0", "--max-retries", "0", "--out", str(run_dir), "-q")
    # every sample failed once: the command says so and exits 1, naming the way to run them again
    assert r.returncode == 1 and all(x["error"] for x in _results(run_dir)), r.stderr
    assert f"insandbox bench --resume {run_dir}" in " ".join(r.stdout.split()), r.stdout
    t_resume = time.time()
    r = cli("bench", "--resume", str(run_dir), "-q")
    assert r.returncode == 0, r.stderr
    _one_per_sample(run_dir)
    spans = [(q["t_recv"], q["t_sent"]) for q in srv.requests if q["t_recv"] >= t_resume]
    in_flight = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
    assert len(spans) == N_ROWS and in_flight <= 2, spans
