"""single-choice: the benchmark's strict letter, limited to the row's options."""
from __future__ import annotations

import pytest

from insandbox.rl.rewards.single_choice import score_single_choice

ABCD = ["A", "B", "C", "D"]
QUESTION = "Which city?\nA. Paris\nB. Lyon\nC. Nice\n\nWrite the letter to /testbed/answer.txt."


@pytest.mark.parametrize("answer", ["C", "C\n", "(C)", "**C**", "Answer: C", "The answer is (C).",
                                    "\\boxed{C}", "<think>maybe A? no.</think>C", "C. Nice", '{"answer": "C"}'])
def test_right_letter_in_its_usual_forms(answer):
    verdict = score_single_choice(answer, "C", ABCD, "")
    assert verdict.correct == 1.0, verdict.detail
    assert verdict.detail["extracted"] == "C"


@pytest.mark.parametrize("answer, why", [
    ("B", None),
    ("C and D", "several letters chosen: C, D"),
    ("E", "E is not one of the options A-D"),
    ("I do not know", "no choice letter found"),
    ("C1CC(O)CC1", "no choice letter found"),  # a letter glued to other characters is no letter
    ("", "no choice letter found"),
])
def test_wrong_or_no_letter(answer, why):
    verdict = score_single_choice(answer, "C", ABCD, "")
    assert verdict.correct == 0.0
    assert verdict.detail.get("why") == why


def test_the_last_statement_wins_and_earlier_ones_are_kept_for_audit():
    verdict = score_single_choice("Answer: A\nOn second thought, the answer is C.", "C", ABCD, "")
    assert verdict.correct == 1.0
    assert verdict.detail["stated"] == ["A", "C"]


def test_options_come_from_the_row_then_from_the_question():
    assert score_single_choice("D", "C", ["A", "B", "C", "D", "E"], QUESTION).detail["options"] == "ABCDE"
    from_question = score_single_choice("D", "C", [], QUESTION)
    assert from_question.detail["options"] == "ABC" and from_question.detail["options_from"] == "question"
    assert from_question.detail["why"] == "D is not one of the options A-C"
    texts = score_single_choice("C", "C", ["Paris", "Lyon", "Nice"], "")  # option texts: lettered in order
    assert texts.correct == 1.0 and texts.detail["options"] == "ABC"
    anything = score_single_choice("Z", "Z", [], "no options written here")
    assert anything.correct == 1.0 and anything.detail["options_from"].startswith("any letter")


def test_a_question_misread_allows_any_letter_but_a_row_that_misses_its_answer_is_broken():
    misread = score_single_choice("D", "D", [], QUESTION)
    assert misread.correct == 1.0 and misread.detail["options"] == "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    with pytest.raises(ValueError, match="not among the row's options ABC"):
        score_single_choice("D", "D", ["A", "B", "C"], "")


@pytest.mark.parametrize("gold", ["A,C", "", "Paris", None, 3])
def test_a_ground_truth_that_is_not_one_letter_is_a_broken_row(gold):
    with pytest.raises(ValueError):
        score_single_choice("A", gold, ABCD, "")
