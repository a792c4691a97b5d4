"""open answers (text): normalised exact match and token F1, best over the ground truth and aliases."""
from __future__ import annotations

import pytest

from insandbox.rl.rewards.normalise import normalise, tokens
from insandbox.rl.rewards.open_answer import exact_match, score_open_text, token_f1

PARIS = ["Paris", "City of Paris"]


@pytest.mark.parametrize("text, normalised", [
    ("The Eiffel Tower!", "eiffel tower"),
    ("  An apple,\ta pear ", "apple pear"),
    ("3.5", "3.5"),  # not "35"
    ("1,000 people", "1000 people"),
    ("1,5", "1,5"),  # no locale guessed
    ("-4 °C", "-4 °c"),
    ("−4", "-4"),  # U+2212
    ("1990–1995", "1990 1995"),
    ("New-York", "new york"),
    ("U.S.A.", "usa"),
    ("don't", "dont"),
    ("Straße", "strasse"),
    ("résumé", "résumé"),  # accents are kept
    ("¿Qué?", "qué"),
    ("１２", "12"),  # full-width digits
    ("「東京都」です", "東 京 都 で す"),  # one token per ideograph or kana
    ("the", ""),
])
def test_normalise(text, normalised):
    assert normalise(text) == normalised


@pytest.mark.parametrize("answer", ["Paris", "paris.", "  PARIS\n", '"Paris"', "the city of Paris",
                                    "Answer: Paris", "Final answer: Paris", "The answer is Paris.",
                                    "**Answer:** Paris", "\\boxed{\\text{Paris}}", "<think>Lyon?</think>Paris"])
def test_exact_match_accepts_the_answer_or_an_alias_in_its_usual_forms(answer):
    verdict = score_open_text(answer, PARIS, "exact")
    assert verdict.correct == 1.0, verdict.detail


@pytest.mark.parametrize("answer", ["Lyon", "Paris, France", "I think it is Paris", "Paris or Lyon", ""])
def test_exact_match_refuses_anything_more_or_else(answer):
    assert score_open_text(answer, PARIS, "exact").correct == 0.0


def test_the_detail_says_what_was_compared():
    detail = score_open_text("Answer: The City of Paris.", PARIS, "exact").detail
    assert detail["answer_from"] == "label"
    assert detail["extracted"] == "The City of Paris."
    assert detail["normalised"] == "city of paris"
    assert detail["best_reference"] == "City of Paris"
    assert detail["references"] == PARIS


@pytest.mark.parametrize("answer, references, f1, best", [
    ("Paris", PARIS, 1.0, "Paris"),
    ("Paris France", PARIS, 2 / 3, "Paris"),  # p 1/2, r 1
    ("Paris, France", PARIS, 0.0, None),  # a comma offers two answers (issue 22: it scored 2/3 like a hedge)
    ("the city", PARIS, 0.5, "City of Paris"),  # "city" of ["city", "of", "paris"]: p 1, r 1/3
    ("Lyon", PARIS, 0.0, "Paris"),
    ("Albert Einstein", ["Einstein"], 2 / 3, "Einstein"),
    ("the the the", ["The The"], 0.8, "The The"),  # a band made of articles is still matchable: p 2/3, r 1
    ("東京", ["東京都"], 0.8, "東京都"),  # per-character tokens: p 1, r 2/3
])
def test_token_f1_exact_numbers_and_best_reference(answer, references, f1, best):
    verdict = score_open_text(answer, references, "f1")
    assert verdict.correct == pytest.approx(f1)
    assert verdict.detail["f1"] == pytest.approx(f1)
    if f1:
        assert verdict.detail["best_reference"] == best


def test_token_f1_counts_repeated_tokens_once_each():
    match = token_f1("paris paris paris", "Paris")
    assert (match.precision, match.recall, match.score) == (pytest.approx(1 / 3), 1.0, pytest.approx(0.5))


def test_exact_match_and_f1_on_references_that_normalise_to_nothing():
    assert exact_match("The", "the").score == 1.0
    assert exact_match("a", "the").score == 0.0
    assert token_f1("", "Paris").score == 0.0
    assert tokens("...") == []
    assert score_open_text("!!!", ["?"], "exact").correct == 0.0  # punctuation never matches anything
