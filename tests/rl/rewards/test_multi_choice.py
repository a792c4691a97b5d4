"""multi-choice: the letter set stated, exact or set F1; what counts as a set and what does not."""
from __future__ import annotations

import pytest

from insandbox.rl.rewards.multi_choice import read_letters, score_multi_choice, set_f1

AE = ["A", "B", "C", "D", "E"]


def score(answer, gold="A,C", mode="exact", options=AE, question=""):
    return score_multi_choice(answer, gold, options, question, mode)


@pytest.mark.parametrize("answer", [
    "A, C", "A,C", "C,A", "C and A", "A; C", "A/C", "A & C", "(A) (C)", "(A)(C)", "**A**, **C**", "A\nC",
    "a, c", "AC", "CA", "A. C.", "A. Paris\nC. Nice", "\\boxed{A,C}", "\\boxed{\\text{A, C}}",
    "\\boxed{A}, \\boxed{C}", "Answer: A, C", "The correct options are A and C.", "**Answer:** A, C",
    "Answer:\nA\nC", "<think>B? no.</think>\nA, C", "A，C", "A、C", "A, C, A",
])
def test_the_right_set_in_its_usual_forms(answer):
    verdict = score(answer)
    assert verdict.correct == 1.0, verdict.detail
    assert verdict.detail["extracted"] == ["A", "C"]


@pytest.mark.parametrize("answer, why", [
    ("A", None), ("A, B, C", None), ("B, D", None),
    ("A and maybe C", "not a list of letters"), ("A, C are wrong", "not a list of letters"),
    ("ac", "not a list of letters"),  # a lower-case run is a word, not letters
    ("I think A, C", "not a list of letters"),
    ("", "no answer"), ("<think>A, C</think>", "no answer"),
])
def test_wrong_sets_and_no_set(answer, why):
    verdict = score(answer)
    assert verdict.correct == 0.0, verdict.detail
    assert verdict.detail.get("why") == why


def test_letters_outside_the_options_are_wrong_not_ignored():
    verdict = score("A, C, F")
    assert verdict.correct == 0.0
    assert verdict.detail["extracted"] == ["A", "C", "F"] and verdict.detail["outside_options"] == ["F"]
    f1 = score("A, C, F", mode="f1")
    assert f1.correct == 0.0 and f1.detail["wrong"] == ["F"]  # a wrong letter: no partial credit (issue 22)


def test_a_repeated_letter_counts_once_and_is_recorded():
    verdict = score("A, A, C")
    assert verdict.correct == 1.0 and verdict.detail["repeated"] == ["A"]


# issue 22: plain set F1 paid 0.5 for "A, B", 0.8 for "A, C, E" and 4/7 for every option; a wrong
# letter now scores 0 (the set's F1, precision and recall stay in `detail`)
@pytest.mark.parametrize("answer, f1, precision, recall", [
    ("A, C", 1.0, 1.0, 1.0),
    ("A", 2 / 3, 1.0, 0.5),
    ("A, B", 0.0, 0.5, 0.5),
    ("A, C, E", 0.0, 2 / 3, 1.0),
    ("A, B, C, D, E", 0.0, 0.4, 1.0),  # choosing everything earns nothing
    ("B, D", 0.0, 0.0, 0.0),
    ("nothing", 0.0, None, None),
])
def test_set_f1_exact_numbers(answer, f1, precision, recall):
    verdict = score(answer, mode="f1")
    assert verdict.correct == pytest.approx(f1)
    assert verdict.detail["method"] == "letter-set F1"
    if precision is not None:
        assert verdict.detail["precision"] == pytest.approx(precision)
        assert verdict.detail["recall"] == pytest.approx(recall)


def test_set_f1_of_an_empty_prediction_is_zero():
    assert set_f1(set(), {"A"}) == (0.0, 0.0, 0.0)


def test_read_letters_shapes():
    assert read_letters("A, C") == (["A", "C"], "letter list")
    assert read_letters("A. Paris\nC. Nice") == (["A", "C"], "option lines")
    assert read_letters("ACD") == (["A", "C", "D"], "run of letters")
    assert read_letters("Paris") == (None, "not a list of letters")
    assert read_letters("  \n") == (None, "empty")


def test_ground_truth_forms_and_options_from_the_question():
    assert score("C, A", gold=["C", "A"]).correct == 1.0
    assert score("C", gold="C").correct == 1.0  # a one-letter multi-choice answer
    question = "Which are ports?\n(A) Genoa (B) Milan (C) Naples\nWrite all letters."
    verdict = score("A, C", options=[], question=question)
    assert verdict.correct == 1.0 and verdict.detail["options"] == "ABC"
    with pytest.raises(ValueError):
        score("A", gold="A,F")  # the row's options miss its own answer
    with pytest.raises(ValueError):
        score("A", gold="Genoa and Naples")
