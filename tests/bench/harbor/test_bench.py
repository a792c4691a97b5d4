"""`insandbox bench` on Harbor task folders (bench/harbor/): each shape a task set uses, scored as its
verifier says, with the verifier's failures shown as failures, never as a silent 0. Real containers,
real image builds, real HTTP to the scripted model."""
from __future__ import annotations

import json
from pathlib import Path

from tests.bench.harbor.tasks import RIGHT, WRONG, model, write_task
from tests.helpers import cli

JSON_TEST = """#!/bin/bash
echo 1 > /logs/verifier/reward.txt
echo '{"reward": 0.25, "style": 1}' > /logs/verifier/reward.json
"""
OLLEH_TEST = """#!/bin/bash
[ "$(cat /app/out.txt)" = olleh ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
"""
# rewrites the reward file for as long as it lives: a process the agent leaves behind
REWRITER = ("nohup sh -c 'while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' "
            ">/dev/null 2>&1 &")


def _records(folder: Path) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, (folder / "results.jsonl").read_text().splitlines())}


def _verification(folder: Path, task: str) -> dict:
    traj = json.loads((folder / "samples" / "sandbox" / task / "r0" / "trajectory.json").read_text())
    return traj["verification"] | {"config": traj["config"]}


def test_a_task_set_in_every_shape_scores_as_its_verifiers_say(scripted, tmp_path, docker_image):
    ds = tmp_path / "dataset"
    write_task(ds, "right", toml='[environment]\nmemory = "512M"\nnetwork_mode = "no-network"\n')
    write_task(ds, "wrong")
    write_task(ds, "json", test=JSON_TEST)
    write_task(ds, "image", image=docker_image, test=OLLEH_TEST)
    write_task(ds, "selfreward")
    write_task(ds, "separate", toml='[verifier]\nenvironment_mode = "separate"\n')
    write_task(ds, "separate-right", toml='[verifier]\nenvironment_mode = "separate"\n')
    write_task(ds, "timeout", toml="[verifier]\ntimeout_sec = 2\n", test="#!/bin/bash\nsleep 60\n")
    write_task(ds, "missing", test="#!/bin/bash\ntrue\n")
    write_task(ds, "malformed", test="#!/bin/bash\necho abc > /logs/verifier/reward.txt\n")
    write_task(ds, "allow", toml='[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["example.org"]\n')
    srv = scripted(model(("right", [RIGHT]), ("wrong", [WRONG]), ("json", [RIGHT]),
                         ("image", ["mkdir -p /app && echo olleh > /app/out.txt"]),
                         ("selfreward", ["mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt "
                                         "&& echo 1 > /logs/verifier/reward.json", WRONG]),
                         ("separate-right", [RIGHT]), ("separate", [REWRITER, WRONG]),
                         ("timeout", [RIGHT]), ("missing", [RIGHT]), ("malformed", [RIGHT]), ("allow", [RIGHT])))
    out = tmp_path / "out"
    r = cli("bench", str(ds), "--model", "m", "--base-url", srv.url, "--api-key", "k", "--output-dir", str(out),
            "--concurrency", "4", "-q", timeout=900)
    assert r.returncode == 1, r.stderr[-3000:]  # three verifications failed: not a success
    assert "run them again with: insandbox bench --resume" in r.stdout
    scores = {}
    for folder in sorted(p for p in out.iterdir() if p.is_dir()):
        (rec,) = _records(folder).values()
        scores[folder.name] = (rec["score"], (rec["error"] or "").removeprefix("verification failed: ")[:20])
    assert scores == {
        "right": (1.0, ""), "wrong": (0.0, ""), "json": (0.25, ""), "image": (1.0, ""), "selfreward": (0.0, ""),
        "separate": (0.0, ""), "separate-right": (1.0, ""), "allow": (1.0, ""),
        "timeout": (None, "tests/test.sh ran pas"[:20]), "missing": (None, "tests/test.sh wrote "),
        "malformed": (None, "/logs/verifier/rewar")}
    assert _verification(out / "json", "json")["rewards"] == {"reward": 0.25, "style": 1.0}  # reward.json wins
    assert _verification(out / "json", "json")["source"] == "/logs/verifier/reward.json"
    assert _verification(out / "separate", "separate")["separate"] is True
    assert _verification(out / "timeout", "timeout")["timed_out"] is True
    right, allow = _verification(out / "right", "right")["config"], _verification(out / "allow", "allow")["config"]
    assert (right["network"], right["memory"]) == ("none", "512m")
    assert (allow["network"], allow["allow_hosts"]) == ("registries", ["example.org"])
    index = json.loads((out / "harbor.json").read_text())
    assert [t["task"] for t in index["tasks"]] == sorted(scores)
    assert index["tasks_scored"] == 11 and abs(index["mean_reward"] - 4.25 / 11) < 1e-9  # failed ones count 0


def test_one_task_folder_into_the_folder_given_and_the_oracle(scripted, tmp_path, docker_image):
    task = write_task(tmp_path, "rev")
    srv = scripted(model(("rev", [RIGHT])))
    out = tmp_path / "out"
    r = cli("bench", str(task), "--model", "m", "--base-url", srv.url, "--api-key", "k", "--output-dir", str(out),
            timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _records(out)["rev"]["score"] == 1.0 and _records(out)["rev"]["score_method"] == "verifier (reward.txt)"
    # the oracle runs the task's own solution: a task set's self-check, with no model server
    oracle = tmp_path / "oracle"
    r = cli("bench", str(task), "--agent", "oracle", "--repeats", "3", "--out", str(oracle), "-q", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    records = [json.loads(line) for line in (oracle / "results.jsonl").read_text().splitlines()]
    assert sorted((r["repeat"], r["score"]) for r in records) == [(0, 1.0), (1, 1.0), (2, 1.0)]
    # --resume on a finished run: nothing runs again, the records stay
    r = cli("bench", "--resume", str(oracle), "-q", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len((oracle / "results.jsonl").read_text().splitlines()) == 3
    # a task whose solution is wrong fails its own check
    broken = write_task(tmp_path / "b", "broken", solve=WRONG)
    r = cli("bench", str(broken), "--agent", "oracle", "--out", str(tmp_path / "oracle-b"), "-q", timeout=600)
    assert _records(tmp_path / "oracle-b")["broken"]["score"] == 0.0
    r = cli("bench", "math", "--agent", "oracle", timeout=60)
    assert r.returncode == 2 and "name a Harbor task folder" in r.stderr
