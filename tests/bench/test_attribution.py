"""Who ended a sample is decided by what the host sees, and every sample counts (bench/sample.py, the
backends' `_dead_reason`, bench/stats.py). A scripted model right on one item of five scores 20% honestly;
breaking its own sandbox on the four it gets wrong (its first process made the OOM killer's pick, its CPU
limit lowered then loaded, its file limit lowered, its server killed during the copy-back after a wrong
answer) must not score more: each broken sample is the model's doing, scored 0 and never retried. Real
containers, real HTTP to the scripted model."""
from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import cli

ITEMS = ["qa", "qb", "qc", "qd", "qe"]
TASK = """name: attribution
extends: _base
scorer: exact
instance_prompt: |-
  {problem_statement}
"""

# what breaks the sandbox, one way per item the model gets wrong
BREAKS = {
    # many small hogs: the server, at OOM score 1000, is the kernel's pick, not one of them
    "qb": "echo 1000 > /proc/1/oom_score_adj; for i in $(seq 40); do python3 -c 'import time; a = b\"x\" * (12 << 20); "
          "time.sleep(60)' & done; wait",
    "qc": "prlimit --pid 1 --cpu=1:1; yes 0123456789abcdef | head -c 3000000000",
    # an orphan for the server to collect: it looks through /proc, and cannot open it any more
    "qd": "prlimit --pid 1 --nofile=3:3; (sleep 0.2 &); sleep 3",
    # a wrong answer, then the server loses its open files while the answer is being collected
    "qe": "echo wrong > /testbed/answer.txt; (sleep 0.5; prlimit --pid 1 --nofile=3:3) >/dev/null 2>&1 &",
}


def _bash(cmd: str) -> dict:
    return {"tool": "execute_bash", "args": {"command": cmd}}


def _script(breaking: bool) -> dict:
    scripts = [{"match": "item qa", "turns": [_bash("echo right > /testbed/answer.txt"), {"tool": "submit"}]}]
    for item in ITEMS[1:]:
        turns = [_bash("echo wrong > /testbed/answer.txt")]
        if breaking:
            turns += [_bash(BREAKS[item]), _bash("echo still here")]
        scripts.append({"match": f"item {item}", "turns": turns + [{"tool": "submit"}]})
    return {"scripts": scripts}


def _bench(scripted, tmp_path: Path, breaking: bool) -> tuple[int, dict, list[dict]]:
    srv = scripted(_script(breaking))
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": i, "problem_statement": f"item {i}", "ground_truth": "right"}) + "\n"
                            for i in ITEMS))
    task = tmp_path / "attribution.yaml"
    task.write_text(TASK)
    run_dir = tmp_path / ("breaking" if breaking else "honest")
    r = cli("bench", str(task), "--data", str(data), "--model", "m", "--base-url", srv.url, "--network", "none",
            "--memory", "256m", "--concurrency", "5", "--retries", "3",
            "--out", str(run_dir), "-q", timeout=600)
    summary = json.loads((run_dir / "summary.json").read_text())["tasks"]["attribution"]["sandbox"]
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    return r.returncode, summary, records


def test_breaking_the_sandbox_never_scores_more_than_a_wrong_answer(scripted, docker_image, tmp_path):
    rc, honest, _ = _bench(scripted, tmp_path, breaking=False)
    assert rc == 0 and honest["accuracy"] == 0.2 and honest["errors"] == 0, honest
    rc, broken, records = _bench(scripted, tmp_path, breaking=True)
    assert broken["accuracy"] <= honest["accuracy"], broken
    assert (broken["n"], broken["errors"], broken["accuracy"]) == (5, 0, 0.2), broken
    by_id = {r["id"]: r for r in records}
    for item in ("qb", "qc", "qd"):
        r = by_id[item]
        assert (r["exit_reason"], r["score"], r["error"], r["attempts"]) == ("sandbox_error", 0.0, None, 1), r
        assert r["score_method"] == "sandbox broke itself", r
        assert "nothing outside it" in r["score_detail"]["why"], r
    assert by_id["qe"]["score"] == 0.0 and by_id["qe"]["error"] is None and by_id["qe"]["attempts"] == 1
    assert rc == 0
