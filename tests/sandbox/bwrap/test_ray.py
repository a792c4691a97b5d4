"""`insandbox bench --ray` on nodes without Docker: a local two-node Ray cluster whose nodes see no
engine (DOCKER_HOST points at nothing) and have the image's files from INSANDBOX_ROOTFS, the samples run
in bwrap sandboxes on both nodes."""
from __future__ import annotations

import json
import os
from pathlib import Path

import insandbox
from insandbox.bench.runner import BenchConfig
from insandbox.config import RunConfig
from insandbox.distributed.bench import run_bench
from tests.sandbox.conftest import NO_DOCKER, cache_of


def test_bench_on_ray_nodes_without_docker(rootfs_tar, scripted, run_async, tmp_path, monkeypatch):
    from ray.cluster_utils import Cluster

    # what each node's workers inherit, as `ray start` in a job script would pass it on
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(Path(insandbox.__file__).parents[1]),
                                                                  os.environ.get("PYTHONPATH")))))
    monkeypatch.setenv("DOCKER_HOST", NO_DOCKER)
    monkeypatch.setenv("INSANDBOX_ROOTFS", str(rootfs_tar))
    monkeypatch.setenv("INSANDBOX_ROOTFS_CACHE", str(cache_of(os.geteuid())))
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": "echo done > /testbed/answer.txt"}},
                              {"tool": "submit"}]})
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": f"s{i}", "problem_statement": f"Probe {i}.", "ground_truth": "done"})
                            + "\n" for i in range(4)))
    task = tmp_path / "probe.yaml"
    task.write_text("name: probe\nextends: _base\nscorer: exact\ninstance_prompt: |-\n  {problem_statement}\n")
    cfg = BenchConfig(task=str(task), data=data, concurrency=4, output_dir=tmp_path / "run",
                      run=RunConfig(model="scripted", base_url=srv.url, max_steps=4, backend="bwrap", network="none"))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        result = run_async(run_bench(cfg, ray=cluster.address))
    finally:
        import ray

        ray.shutdown()
        cluster.shutdown()
    recs = result.records
    assert len(recs) == 4 and all(r["score"] == 1.0 and r["error"] is None for r in recs), recs
    assert len({r["node"] for r in recs}) == 2  # both nodes ran samples
    for r in recs:
        sandbox = json.loads((cfg.output_dir / r["trajectory"]).read_text())["sandbox"]
        assert sandbox["backend"] == "bwrap" and sandbox["source"].startswith("tar ")
