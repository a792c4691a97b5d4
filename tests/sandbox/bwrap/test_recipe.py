"""The README's recipe for a Slurm node without Docker ("Without Docker: bubblewrap"), step by step as written:
`insandbox image export --out ROOTFS.tar` where Docker runs, then, as an unprivileged user with no engine,
INSANDBOX_ROOTFS set to that tar, a node-local cache and sandbox folder, `insandbox bench --backend bwrap`
against a model server on 127.0.0.1, and `insandbox clean --backend bwrap`.

Regression: the README (and the bwrap backend's own error message) named `insandbox image export`, which did
not exist."""
from __future__ import annotations

import json
import os
import shutil

from tests.helpers import cli

CLI = "import sys; from insandbox.cli import main; sys.argv[0] = 'insandbox'; main()"


def test_the_slurm_recipe_runs_as_written(docker_image, scripted, as_user, user_tmp):
    shared = user_tmp / "shared"  # the cluster's shared storage
    shared.mkdir(mode=0o755)
    tar = shared / "insandbox-rootfs.tar"
    try:
        # once, where Docker runs
        r = cli("image", "export", "--image", docker_image, "--out", str(tar), timeout=900)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"exported {docker_image} to {tar} (") and f"INSANDBOX_ROOTFS={tar}" in r.stdout
        tar.chmod(0o644)
        # the job: no Docker, no root
        srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": "echo A > /testbed/answer.txt"}},
                                  {"tool": "submit"}]})
        rows = user_tmp / "rows.jsonl"
        rows.write_text(json.dumps({"id": "q1", "problem_statement": "Which one?\nA. x\nB. y", "ground_truth": "A"}))
        node = {"INSANDBOX_ROOTFS": str(tar), "INSANDBOX_ROOTFS_CACHE": str(user_tmp / "node" / "insandbox-rootfs"),
                "INSANDBOX_BWRAP_DIR": str(user_tmp / "node" / "insandbox-sandboxes")}
        out = user_tmp / "bench"
        r = as_user(CLI, env=node, timeout=900, args=(
            "bench", "chem", "--data", str(rows), "--backend", "bwrap", "--network", "none", "--model", "m",
            "--base-url", srv.url, "--concurrency", "2", "--out", str(out), "-q"))
        assert r.returncode == 0, r.stderr[-3000:]
        (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        assert record["error"] is None and record["score"] == 1.0, record
        trajectory = json.loads((out / record["trajectory"]).read_text())
        assert trajectory["sandbox"]["backend"] == "bwrap" and trajectory["sandbox"]["source"].startswith("tar ")
        r = as_user(CLI, env=node, args=("clean", "--backend", "bwrap"))
        assert r.returncode == 0 and r.stdout.strip() == "nothing to clean", (r.stdout, r.stderr)
    finally:  # 1.3 GB of tar and as much unpacked
        shutil.rmtree(shared, ignore_errors=True)
        shutil.rmtree(user_tmp / "node", ignore_errors=True)
        assert not os.path.exists(tar)
