"""`insandbox rl rollout` with the embedded model through llama.cpp: a real policy, real sandboxes."""
from __future__ import annotations

import json

from tests.helpers import cli

ROWS = [{"id": "q1", "problem_statement": "Which letter is right, A or B? The material is in /testbed/documents. "
                                          "Write the letter to /testbed/answer.txt.",
         "ground_truth": "B", "input_files": {"doc_01.txt": "The right letter is B.\n"}, "qa_type": "single-choice",
         "options": ["A", "B"]}]


def test_rollouts_of_the_embedded_model_are_recorded_token_for_token(tmp_path, docker_image):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "out"
    r = cli("rl", "rollout", "--data", str(data), "--out", str(out), "--repeats", "3", "--concurrency", "3",
            "--max-steps", "2", "--max-tokens", "32", "--max-response-tokens", "512", "--image", docker_image,
            "--seed", "7", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    records = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    assert len(records) == 3 and summary["rollouts"] == 3 and summary["decode_check"]["mismatches"] == 0
    for rec in records:
        sampled = [lp for lp, m in zip(rec["response_logprobs"], rec["response_mask"]) if m]
        assert sampled and all(lp is not None and lp <= 0 for lp in sampled)  # the sampler's own logprobs
        assert all(lp is None for lp, m in zip(rec["response_logprobs"], rec["response_mask"]) if not m)
        assert rec["num_turns"] >= 1 and rec["exit_reason"] and rec["trajectory"]["steps"]
    # a group's samples are independent draws, not one sample repeated
    firsts = {tuple(t for t, m in zip(rec["response_ids"], rec["response_mask"]) if m)[:16] for rec in records}
    assert len(firsts) > 1
    assert 0 <= summary["sandbox_share"] <= 1 and summary["rollouts_per_min"] > 0


def test_bad_rollout_arguments_are_one_line(tmp_path):
    r = cli("rl", "rollout", "--data", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "no such file" in r.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    r = cli("rl", "rollout", "--data", str(bad), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "not JSONL" in r.stderr
