"""The rewards as a benchmark scorer: held-out context tasks scored as training scored them."""
from __future__ import annotations

import json

from insandbox.bench.data import to_row
from insandbox.bench.scorers import make_scorer
from tests.helpers import REPO, cli

ROWS = [
    {"id": "s1", "problem_statement": "Which? A. x B. y", "ground_truth": "B", "qa_type": "single-choice",
     "options": ["A", "B"]},
    {"id": "m1", "problem_statement": "Which are true? A. p B. q C. r", "ground_truth": "A,C",
     "qa_type": "multi-choice", "options": ["A", "B", "C"]},
    {"id": "o1", "problem_statement": "Who?", "ground_truth": "Marie Curie", "aliases": ["Curie"], "qa_type": "open"},
    {"id": "n1", "problem_statement": "How many?", "ground_truth": "42", "qa_type": "open", "answer_type": "number"},
]


def test_the_rewards_score_bench_rows_by_their_qa_type(run_async):
    scorer = make_scorer("insandbox.rl.rewards.bench_scorer:score")
    rows = {r["id"]: to_row(r, i) for i, r in enumerate(ROWS)}

    async def body():
        cases = [("s1", "Answer: B", 1.0), ("s1", "A", 0.0), ("m1", "C and A", 1.0), ("m1", "A", 0.0),
                 ("o1", "Answer: Curie", 1.0), ("o1", "Pierre", 0.0), ("n1", "It is 42.0", 1.0), ("n1", "41", 0.0)]
        for rid, answer, want in cases:
            got = await scorer.score(answer, rows[rid])
            assert got.score == want, (rid, answer, got)
        assert "insandbox.rl.rewards (multi-choice)" == (await scorer.score("A,C", rows["m1"])).method
    run_async(body())


def test_a_bench_of_context_tasks_in_plain_mode(scripted, tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    srv = scripted({"scripts": [{"match": "Which? A.", "llm_turns": [{"content": "Thinking.\nAnswer: B"}]},
                                {"match": "Which are true", "llm_turns": [{"content": "Answer: A, C"}]},
                                {"match": "Who?", "llm_turns": [{"content": "Answer: Albert Einstein"}]},
                                {"match": "How many?", "llm_turns": [{"content": "Answer: 42"}]}]})
    out = tmp_path / "run"
    r = cli("bench", str(REPO / "examples/rl/context_tasks.yaml"), "--data", str(data), "--mode", "llm", "--model",
            "m", "--base-url", srv.url, "--out", str(out), "-q")
    assert r.returncode == 0, r.stderr
    scores = {json.loads(x)["id"]: json.loads(x)["score"] for x in (out / "results.jsonl").read_text().splitlines()}
    assert scores == {"s1": 1.0, "m1": 1.0, "o1": 0.0, "n1": 1.0}
