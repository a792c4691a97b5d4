"""`insandbox bench --ray` on a local multi-node Ray cluster: samples spread over the nodes, their
folders and records streamed back into the driver's run folder, `--resume`, a node lost mid-run."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import psutil

from insandbox.bench.runner import BenchConfig
from insandbox.config import RunConfig
from insandbox.distributed.bench import run_bench
from insandbox.sandbox.docker import LABEL, LABEL_OWNER, engine
from tests.helpers import cli

TASK = "name: probe\nextends: _base\nscorer: exact\ninstance_prompt: |-\n  {problem_statement}\n"


def _answer(text: str = "done", latency: float = 0.0, steps: int = 0) -> list[dict]:
    turns = [{"tool": "execute_bash", "args": {"command": f"echo {i} > /testbed/output/step{i}.txt"},
              "latency": latency} for i in range(steps)]
    return turns + [{"tool": "str_replace_editor", "args": {"command": "create", "path": "/testbed/answer.txt",
                                                            "file_text": text}}, {"tool": "submit"}]


def _bench(tmp_path: Path, ids: list[str], url: str, concurrency: int) -> BenchConfig:
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": i, "problem_statement": f"Probe {i}.", "ground_truth": "done"}) + "\n"
                            for i in ids))
    task = tmp_path / "probe.yaml"
    task.write_text(TASK)
    return BenchConfig(task=str(task), data=data, concurrency=concurrency, output_dir=tmp_path / "run",
                       retry_backoff_s=0.1, run=RunConfig(model="scripted", base_url=url, max_steps=8))


def _lines(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines() if x.strip()]


class Recorder:
    """Progress that notes, as each record arrives, what the run folder holds at that moment."""

    def __init__(self, run_dir: Path, on_first=None):
        self.run_dir, self.on_first = run_dir, on_first
        self.seen: list[tuple[dict, int, bool]] = []  # record, lines in results.jsonl, its trajectory there
        self.status: list[str] = []

    def on_status(self, text: str) -> None:
        self.status.append(text)

    def on_progress(self, text: str) -> None:
        pass

    def on_start(self, *args) -> None:
        pass

    def on_sample_start(self, *args) -> None:
        pass

    def on_sample(self, record: dict) -> None:
        self.seen.append((record, len(_lines(self.run_dir)), (self.run_dir / record["trajectory"]).is_file()))
        if self.on_first and len(self.seen) == 1:
            self.on_first()


def test_samples_run_on_every_node_and_stream_back_into_the_run_folder(ray_cluster, scripted, run_async, tmp_path):
    srv = scripted({"turns": _answer(steps=1, latency=0.3)})
    cfg = _bench(tmp_path, [f"s{i}" for i in range(4)], srv.url, concurrency=4)
    progress = Recorder(cfg.output_dir)
    result = run_async(run_bench(cfg, progress, ray=ray_cluster.address))
    recs = result.records
    assert len(recs) == 4 and all(r["score"] == 1.0 and r["error"] is None for r in recs), recs
    assert len({r["node"] for r in recs}) == 2  # both nodes ran samples
    # streamed: each record was appended as its sample finished, its folder already in place
    assert [n for _, n, _ in progress.seen] == [1, 2, 3, 4]
    assert all(there for _, _, there in progress.seen)
    for r in recs:  # the sample's folder came back from its node: trajectory, answer, output files
        folder = cfg.output_dir / Path(r["trajectory"]).parent
        assert (folder / "answer.txt").read_text() == "done"
        assert (folder / "files" / "step0.txt").read_text().strip() == "0"
        assert json.loads((folder / "trajectory.json").read_text())["exit_reason"] == "submitted"
    assert any(s.startswith("Ray: 2 node(s)") for s in progress.status)
    assert result.summary["samples"] == 4 and result.summary["session"]["samples"] == 4


def test_resume_on_the_cluster_runs_only_what_is_missing(ray_cluster, scripted, run_async, tmp_path):
    srv = scripted({"turns": _answer()})
    cfg = _bench(tmp_path, ["a", "b", "c"], srv.url, concurrency=3)
    run_dir = cfg.output_dir
    run_async(run_bench(cfg, ray=ray_cluster.address))
    # as if the driver was killed while "b" ran: its folder is there, its record is not
    kept = [r for r in _lines(run_dir) if r["id"] != "b"]
    (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    t_resume = time.time()
    r = cli("bench", "--resume", str(run_dir), "--ray", ray_cluster.address, "-q")
    assert r.returncode == 0, r.stderr
    lines = _lines(run_dir)
    assert sorted(x["id"] for x in lines) == ["a", "b", "c"]  # one record each
    assert [x["id"] for x in lines if x not in kept] == ["b"]
    again = next(x for x in lines if x["id"] == "b")
    assert again["score"] == 1.0 and again["cut_off_earlier"] and again["attempts"] == 2 and again["node"]
    assert (run_dir / again["trajectory"]).is_file()
    started = [q for q in srv.requests if q["t_recv"] >= t_resume and q["turn"] == 0]
    assert len(started) == 1  # only "b" ran again


def _pids_of(node) -> set[int]:
    """Every process of a Ray node of the local cluster (its raylet and the workers under it)."""
    pids = set()
    for infos in node.all_processes.values():
        for info in infos:
            try:
                proc = psutil.Process(info.process.pid)
                pids |= {proc.pid, *(c.pid for c in proc.children(recursive=True))}
            except psutil.NoSuchProcess:
                pass
    return pids


def _remove_containers_of(pids: set[int]) -> None:
    """The sandboxes the killed node's workers had started (a real lost machine takes them along)."""
    api = engine.api()
    for c in api.containers(all=True, filters={"label": f"{LABEL}=1"}):
        owner = (c.get("Labels") or {}).get(LABEL_OWNER, "").split(":")
        if len(owner) > 1 and owner[1].isdigit() and int(owner[1]) in pids:
            api.remove_container(c["Id"], force=True, v=True)


def test_a_lost_nodes_samples_run_again_on_the_others(ray_cluster, scripted, run_async, tmp_path):
    doomed = ray_cluster.add_node(num_cpus=1)
    ray_cluster.wait_for_nodes()
    killed: set[int] = set()
    # one quick sample; the others run a few seconds, so the doomed node has some in flight when it goes
    srv = scripted({"scripts": [{"match": "Probe quick.", "turns": _answer()},
                                {"match": "Probe", "turns": _answer(steps=4, latency=0.6)}]})
    cfg = _bench(tmp_path, ["quick", *(f"slow{i}" for i in range(5))], srv.url, concurrency=6)

    def kill_node() -> None:
        killed.update(_pids_of(doomed))
        ray_cluster.remove_node(doomed, allow_graceful=False)

    killer = threading.Thread(target=kill_node)
    progress = Recorder(cfg.output_dir, on_first=killer.start)
    try:
        result = run_async(run_bench(cfg, progress, ray=ray_cluster.address))
    finally:
        killer.join()
        _remove_containers_of(killed)
        ray_cluster.wait_for_nodes()  # the cluster knows the node is gone before the next test looks at it
    lines = _lines(cfg.output_dir)
    assert sorted(x["id"] for x in lines) == sorted(["quick", *(f"slow{i}" for i in range(5))])  # one each
    assert all(x["score"] == 1.0 and x["error"] is None for x in lines), lines
    moved = [x for x in lines if x.get("lost_nodes")]
    assert moved  # the doomed node had samples in flight; they ran again elsewhere
    gone = {lost["node"] for x in moved for lost in x["lost_nodes"]}
    assert len(gone) == 1
    for x in moved:
        assert not any(g.startswith(x["node"]) for g in gone)  # it finished on another node
        assert x["attempts"] == 1 and "failed_attempts" not in x  # the loss used up no retry
        assert (cfg.output_dir / x["trajectory"]).is_file()
    assert any("lost" in s for s in progress.status)
    assert result.summary["samples"] == 6 and result.summary["errors"] == 0


def test_ray_refuses_the_embedded_model_and_an_address_nobody_answers(tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "a", "problem_statement": "x", "ground_truth": "y"}) + "\n")
    out = tmp_path / "run"
    r = cli("bench", "math", "--data", str(data), "--ray", "auto", "--out", str(out), "-q",
            env={"INSANDBOX_MODEL": "", "INSANDBOX_BASE_URL": ""})
    assert r.returncode == 2 and "--ray needs a model server every node can reach" in r.stderr
    r = cli("bench", "math", "--data", str(data), "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
            "--ray", "127.0.0.1:1", "--out", str(out), "-q")
    assert r.returncode == 2 and "--ray 127.0.0.1:1: no Ray cluster answers there" in r.stderr
    r = cli("bench", "math", "--data", str(data), "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
            "--ray", "head-without-port", "--out", str(out), "-q")
    assert r.returncode == 2 and "give auto or the head node's HOST:PORT" in r.stderr
    assert not out.exists()  # nothing was created


def test_a_sample_folder_survives_the_trip_whole(tmp_path):
    from insandbox.distributed.bench import pack, unpack

    src = tmp_path / "node" / "r0"
    (src / "files" / "deep").mkdir(parents=True)
    (src / "trajectory.json").write_text('{"steps": []}')
    (src / "files" / "deep" / "data.bin").write_bytes(bytes(range(256)) * 10)
    dest = tmp_path / "driver" / "r0"
    dest.mkdir(parents=True)
    (dest / "trajectory.json").write_text("from a session that was cut off")
    unpack(pack(src), dest)
    assert (dest / "trajectory.json").read_text() == '{"steps": []}'  # the new attempt's, over the old
    assert (dest / "files" / "deep" / "data.bin").read_bytes() == bytes(range(256)) * 10
    assert pack(tmp_path / "missing") == b""
    unpack(b"", tmp_path / "empty")
    assert (tmp_path / "empty").is_dir()
