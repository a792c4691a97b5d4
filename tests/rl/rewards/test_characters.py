"""characters.py: one form of signs, digits and letters, read alike by every reader (issue 32)."""
from __future__ import annotations

import pytest

from insandbox.rl.rewards.characters import clean
from insandbox.rl.rewards.scoring import score_answer


def number(gold: str) -> dict:
    return {"qa_type": "open", "ground_truth": gold, "answer_type": "number"}


def text(gold: str) -> dict:
    return {"qa_type": "open", "ground_truth": gold}


MULTI = {"qa_type": "multi-choice", "ground_truth": "A,C", "options": list("ABCDE")}
SINGLE = {"qa_type": "single-choice", "ground_truth": "C", "options": list("ABCD")}
MODES = [{}, {"open_mode": "f1", "multi_choice": "f1"}, {"scoring": "paper"}]


# issue 32: right answers the rewards rejected
@pytest.mark.parametrize("row, answer", [
    (number("0.5"), "½"), (number("1.5"), "1½"), (number("-1.5"), "-1½"), (number("0.75"), "¾"),
    (number("1000"), "1\u2009000"), (number("1000000"), "1\u202f000\u202f000"), (number("1000"), "1\u00a0000"),
    (number("1000"), "1'000"), (number("1000"), "1_000"),
    (number("1000"), "10^3"), (number("1000"), "10³"), (number("0.001"), "10⁻³"), (number("4"), "2²"),
    (number("1500"), "1.5 × 10^3"), (number("1500"), "1.5×10³"),
    (number("-3"), "–3"), (number("-3"), "‒3"), (number("-3"), "‐3"), (number("-3"), "‑3"), (number("-3"), "−3"),
    (number("-3"), "− 3"), (number("-3"), "x = —3"), (number("-0.5"), "–.5"),
    (text("Paris"), "Paris\ufe0f"), (text("Paris"), "Paris\U000e0041"), (text("Istanbul"), "İSTANBUL"),
    (text("İzmir"), "IZMIR"), (text("Istanbul"), "i\u0307stanbul"), (SINGLE, "C\ufe0f"),
])
@pytest.mark.parametrize("mode", range(len(MODES)), ids=["strict", "f1", "paper"])
def test_right_answers_written_otherwise_score_one(row, answer, mode):
    verdict = score_answer(row, answer, **MODES[mode])
    assert verdict.correct == 1.0, verdict.detail


# the paper preset reads a multi-choice answer as comma-separated items, as published: not these
@pytest.mark.parametrize("answer", ["\\{A, C\\}", "$\\{A, C\\}$", "\\left\\{A, C\\right\\}", "A und C", "A et C",
                                    "A и C", "A 和 C"])
@pytest.mark.parametrize("mode", ["exact", "f1"])
def test_a_letter_set_in_latex_braces_or_joined_by_and_in_another_language(answer, mode):
    verdict = score_answer(MULTI, answer, multi_choice=mode)
    assert verdict.correct == 1.0 and verdict.detail["extracted"] == ["A", "C"], verdict.detail


# issue 32: the same character read one way by one reader and another way by another
@pytest.mark.parametrize("answer, value, misread", [
    ("–3", "-3", "3"), ("‒3", "-3", "3"), ("‐3", "-3", "3"), ("—3", "-3", "3"), ("―3", "-3", "3"), ("﹣3", "-3", "3"),
    ("－3", "-3", "3"), ("➖3", "-3", "3"), ("˗3", "-3", "3"), ("⁻3", "-3", "3"), ("＋3", "3", "-3"),
    ("2²", "4", "22"), ("2³", "8", "23"), ("1½", "1.5", "5.5"), ("10₂", None, "102"), ("10₂", None, "10"),
])
@pytest.mark.parametrize("mode", ["exact", "f1"])
def test_a_sign_a_power_or_a_fraction_is_read_alike_by_every_reader(answer, value, misread, mode):
    if value is not None:
        assert score_answer(number(value), answer, open_mode=mode).correct == 1.0
    assert score_answer(number(misread), answer, open_mode=mode).correct == 0.0
    assert score_answer(text(misread), answer, open_mode=mode).correct == 0.0


@pytest.mark.parametrize("raw, cleaned", [
    ("–3", "-3"), ("‐3", "-3"), ("x = −3", "x = -3"), ("− 3", "-3"), ("5 − 3", "5 -3"),
    ("1990–1995", "1990-1995"), ("Paris – Lyon", "Paris – Lyon"), ("COVID‐19", "COVID-19"),
    ("2²", "2^2"), ("10⁻³", "10^{-3}"), ("m²", "m2"), ("H₂O", "H2O"), ("10₂", "10_2"), ("x²", "x2"),
    ("½", "1/2"), ("1½", "3/2"), ("1 ½", "1 1/2"), ("1⁄2", "1/2"),
    ("1\u2009000", "1000"), ("1\u202f234\u202f567", "1234567"), ("1'000", "1000"), ("1 000", "1 000"),
    ("1\u2009000\u2009000\u202f000", "1000000 000"), ("12\u20093", "12 3"), ("0.123\u2009456", "0.123 456"),
    ("Paris\ufe0f", "Paris"), ("Par\u200bis", "Paris"), ("👍🏽", "👍"), ("🏽", "🏽"), ("İSTANBUL", "ISTANBUL"),
    ("٤٢", "42"), ("٣٫٥", "3.5"), ("٥٠٪", "50%"), ("Ｐａｒｉｓ", "Paris"), ("𝐏𝐚𝐫𝐢𝐬", "Paris"), ("①", "1"),
    ("三", "三"), ("Ⅻ", "XII"), ("résumé", "résumé"),
])
def test_clean(raw, cleaned):
    assert clean(raw) == cleaned


def test_clean_text_stays_clean():
    for raw in ["–3", "2²", "1½", "1\u2009000", "İSTANBUL", "Paris\ufe0f", "− 3", "10⁻³", "٣٫٥", "x = ‒.5", "👍🏽"]:
        assert clean(clean(raw)) == clean(raw), raw
