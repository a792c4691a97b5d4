"""Benchmarks: scorers on the dev sets, each task end to end in both modes, resume, the report."""
from __future__ import annotations

import pytest

from insandbox.bench.data import load_rows
from insandbox.bench.scorers import make_scorer
from insandbox.bench.scorers.choice import extract_choice
from insandbox.bench.scorers.judge import Judge
from insandbox.bench.tasks import load_task
from insandbox.models import OpenAIChatClient
from tests.bench.rows import IF_GOLD, TASKS, dev_rows, gold_file, gold_reply, wrong_answer
from tests.helpers import shared_data


@pytest.mark.parametrize("task", [t for t in TASKS if t != "instruct_follow"])
def test_gold_answers_get_full_marks_on_every_dev_row(task, run_async):
    spec = load_task(task)
    scorer = make_scorer(spec.scorer, spec.offline_scorer)

    async def body():
        for row in dev_rows(task):
            for answer in (gold_file(task, row), gold_reply(task, row)):
                result = await scorer.score(answer, row)
                assert result.score == 1.0, (row.id, answer[:80], result)
            assert (await scorer.score(wrong_answer(task, row), row)).score == 0.0, row.id
    run_async(body())


def test_instruct_follow_gold_and_unscorable(run_async, monkeypatch):
    rows = {r.id: r for r in dev_rows("instruct_follow")}
    scorer = make_scorer("ifbench")

    async def body():
        for rid, response in IF_GOLD.items():
            assert (await scorer.score(response, rows[rid])).score == 1.0, rid
            assert (await scorer.score("no", rows[rid])).score == 0.0, rid
        import nltk
        monkeypatch.setattr(nltk.data, "path", [str(shared_data() / "nltk_data")])  # no POS tagger there
        result = await scorer.score("Go there now.", rows["ifbench_258"])  # words:start_verb needs the tagger
        assert result.score is None
        assert "averaged_perceptron_tagger" in result.detail["could_not_check"]["words:start_verb"]
    run_async(body())


def test_choice_extraction():
    assert extract_choice("Answer: C") == "C"
    assert extract_choice("I think... the final answer is (B).") == "B"
    assert extract_choice("\\boxed{D}") == "D"
    assert extract_choice("<think>A? no</think>\n\nC") == "C"
    assert extract_choice('{"answer": "E"}') == "E"
    assert extract_choice("J. Ventricular septal defect") == "J"
    assert extract_choice("I cannot tell") is None
    assert extract_choice("A tough one.\n(C) Ethanol") == "C"


def test_judge_scores_by_verdict(scripted, run_async):
    row = load_rows(shared_data() / "bench" / "physics" / "dev.jsonl", None, None, limit=1)[0]
    srv = scripted({"scripts": [
        {"match": "ANSWER-RIGHT", "llm_turns": [{"content": "Same value. CORRECT"}]},
        {"match": "ANSWER-WRONG", "llm_turns": [{"content": "It is CORRECT in form but the value is INCORRECT"}]},
        {"match": "ANSWER-VAGUE", "llm_turns": [{"content": "hmm"}, {"content": "hmm"}]}]})

    async def body():
        judge = Judge(OpenAIChatClient("judge", base_url=srv.url))
        assert (await judge.score("ANSWER-RIGHT", row)).score == 1.0
        assert (await judge.score("ANSWER-WRONG", row)).score == 0.0
        vague = await judge.score("ANSWER-VAGUE", row)
        assert vague.score is None and vague.detail["why"] == "no verdict"
        sent = srv.requests[0]["messages"][0]["content"]
        assert row.ground_truth in sent and "ANSWER-RIGHT" in sent and row.problem_statement[:50] in sent
        await judge.client.close()
    run_async(body())

