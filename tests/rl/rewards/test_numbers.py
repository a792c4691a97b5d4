"""open answers with answer_type "number": math-verify on the one number stated."""
from __future__ import annotations

import pytest

from insandbox.rl.rewards.numbers import read_number, score_number


@pytest.mark.parametrize("answer", ["42", "42.0", "42.000", "+42", "$42", "$42$", "\\boxed{42}", "42 apples",
                                    "about 42", "x = 42", "42.", "Answer: 42", "The answer is 42.", "4.2e1",
                                    "84/2", "\\frac{84}{2}", "42%", "\\(42\\)", "42\\,\\text{apples}",
                                    "<think>41?</think>42", "４２"])
def test_forty_two_in_its_usual_forms(answer):
    verdict = score_number(answer, ["42"])
    assert verdict.correct == 1.0, verdict.detail


@pytest.mark.parametrize("answer, why", [
    ("41", "not equal to any reference"),
    ("-42", "not equal to any reference"),
    ("42.000001", "not equal to any reference"),
    ("0.42", "not equal to any reference"),  # a percent sign is ignored, not converted
    ("41 or 42", "several numbers: 41, 42"),
    ("between 40 and 45", "several numbers: 40, 45"),
    ("forty-two", "no number"),
    ("", "no answer"),
])
def test_wrong_hedged_or_missing_numbers(answer, why):
    verdict = score_number(answer, ["42"])
    assert verdict.correct == 0.0
    assert verdict.detail["why"] == why


def test_thousands_separators_signs_fractions_and_latex():
    assert score_number("1,000", ["1000"]).correct == 1.0
    assert score_number("1000", ["1,000"]).correct == 1.0
    assert score_number("−3.5", ["-3.5"]).correct == 1.0  # U+2212
    assert score_number("0.5", ["\\frac{1}{2}"]).correct == 1.0
    assert score_number("1/2", ["0.5"]).correct == 1.0
    assert score_number("\\sqrt{4}", ["2"]).correct == 1.0
    assert score_number("2.5 million", ["2.5"]).correct == 1.0  # the words around the number are not read


def test_aliases_any_match_including_words():
    assert score_number("0.5", ["50%", "0.5"]).detail["matched"] == "0.5"
    words = score_number("forty-two", ["42", "forty-two"])
    assert words.correct == 1.0 and words.detail["matched_by"] == "normalised exact match"


def test_read_number_says_what_it_compares():
    assert read_number("about 1,234.5 km") == ("1234.5", "one number")
    assert read_number("4.2e-1") == ("4.2\\times 10^{-1}", "one number")
    assert read_number("3/4 of them") == ("\\frac{3}{4}", "one number")
    assert read_number("\\frac{1}{2}") == ("\\frac{1}{2}", "LaTeX, compared whole")
    assert read_number("H2O") == (None, "no number")  # a digit inside a word is no number
