"""The dispatcher: qa_type and answer_type pick the scorer; a broken row raises, never scores 0."""
from __future__ import annotations

import json

import pytest

from insandbox.rl.rewards.scoring import references, score_answer, score_in_worker
from insandbox.rl.schema import TaskRow


def row(**fields) -> dict:
    base = {"id": "t1", "problem_statement": "Read /testbed/documents and answer.", "ground_truth": "Paris"}
    return TaskRow(**{**base, **fields}).as_record()


def test_each_qa_type_goes_to_its_scorer():
    single = score_answer(row(qa_type="single-choice", ground_truth="B", options=["A", "B", "C"]), "B")
    multi = score_answer(row(qa_type="multi-choice", ground_truth="A,C", options=["A", "B", "C"]), "A, C")
    text = score_answer(row(aliases=["City of Paris"]), "city of paris")
    number = score_answer(row(ground_truth="42", answer_type="number"), "42.0")
    assert [v.correct for v in (single, multi, text, number)] == [1.0, 1.0, 1.0, 1.0]
    assert [v.detail["qa_type"] for v in (single, multi, text, number)] == ["single-choice", "multi-choice",
                                                                            "open", "open"]
    assert number.detail["method"].startswith("math-verify")


def test_modes_reach_the_scorers():
    multi = row(qa_type="multi-choice", ground_truth="A,C", options=["A", "B", "C"])
    assert score_answer(multi, "A", multi_choice="f1").correct == pytest.approx(2 / 3)
    assert score_answer(row(), "Paris France", open_mode="f1").correct == pytest.approx(2 / 3)


def test_a_missing_qa_type_is_open_as_in_the_row_schema():
    assert score_answer({"ground_truth": "Paris"}, "paris").correct == 1.0


@pytest.mark.parametrize("fields, message", [
    ({"qa_type": "true-false", "ground_truth": "true"}, "unknown qa_type"),
    ({"qa_type": "open", "ground_truth": "1", "answer_type": "date"}, "unknown answer_type"),
    ({"qa_type": "open", "ground_truth": None}, "ground_truth must be text"),
    ({"qa_type": "open", "ground_truth": "x", "aliases": "y"}, "aliases must be a list"),
    ({"qa_type": "open", "ground_truth": "x", "aliases": [["y"]]}, "an alias must be text"),
    ({"qa_type": "single-choice", "ground_truth": "E", "options": ["A", "B"]}, "not among the row's options"),
    ({"qa_type": "multi-choice", "ground_truth": "A,C", "options": "ABC"}, "options must be a list"),
])
def test_broken_rows_raise(fields, message):
    with pytest.raises(ValueError, match=message):
        score_answer(fields, "A")


def test_references_are_the_ground_truth_then_the_aliases():
    assert references({"ground_truth": 42, "aliases": ["forty-two"]}) == ["42", "forty-two"]


def test_the_worker_entry_point_returns_json():
    out = score_in_worker(row(qa_type="multi-choice", ground_truth="A,C", options=["A", "B", "C"]), "A, C",
                          "exact", "exact")
    assert json.loads(json.dumps(out)) == out and out["correct"] == 1.0
