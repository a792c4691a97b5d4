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


# issue 32: math-verify read each of these as its last value, so the strict reward paid 1 for gold 3
@pytest.mark.parametrize("answer", [
    "2 \\mid 3", "2 \\sim 3", "2 \\oplus 3", "2 \\to 3", "2 \\| 3", "2 \\vert 3", "2 \\rightarrow 3",
    "2 \\Rightarrow 3", "2 \\implies 3", "2 \\iff 3", "\\frac{4}{2} \\to 3", "\\boxed{2 \\mid 3}", "2 \\textor 3",
    "\\frac{4}{2} \\text{ oder } 3", "\\frac{4}{2} \\quad 3", "\\frac{4}{2}, 3", "x = 2 \\lor x = 3", "\\sqrt{4} 3",
    "\\frac{4}{2} \\\\ 3", "3 \\approx 2", "3 or4", "3または4", "3或4", "3x4", "±3", "\\pm 3", "3 \\pm 0",
    "\\boxed{2} → \\boxed{3}", "\\boxed{2}\t\\boxed{3}", "\\boxed{2} oder \\boxed{3}", "\\boxed{2} or maybe \\boxed{3}",
    "2\n3", "2 = 3", "Lyon = 3 = 2",
])
def test_values_joined_by_anything_but_arithmetic_are_refused(answer):
    for gold in ("2", "3", "4"):
        verdict = score_number(answer, [gold])
        assert verdict.correct == 0.0, (gold, verdict.detail)


@pytest.mark.parametrize("answer, gold", [
    ("2 \\cdot 0 + 3", "3"), ("2\\pi", "2\\pi"), ("3\\sqrt{2}", "3\\sqrt{2}"), ("\\frac{1}{2}", "0.5"),
    ("x = \\frac{6}{2}", "3"), ("10^{3}", "1000"),
    ("1.5 \\times 10^{3}", "1500"), ("\\sqrt[3]{8}", "2"), ("3\\,\\text{cm}", "3"),
    ("\\left(\\frac{1}{2}\\right)", "0.5"), ("The area is 42", "42"), ("Area = 42", "42"),
])
def test_one_value_in_latex_or_arithmetic_is_still_read(answer, gold):
    verdict = score_number(answer, [gold])
    assert verdict.correct == 1.0, verdict.detail
