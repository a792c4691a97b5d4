"""Open answers: normalised exact match, or token F1, against the ground truth and every alias
(the best one counts). Numbers (`answer_type` "number") go to numbers.py instead.

The answer part is found first (answer_part.py: thinking dropped, last \\boxed{}, "Answer:"
label). Text that is nothing but articles ("The") keeps them, so such a reference can still be
matched; a reference that is nothing but punctuation can never be.

Several answers at once score 0 in both modes: an answer part that a separator (any punctuation,
symbol or control character that is not part of a word or a number: ";", "/", "(", "-" between
words, "->", a tab, a line break) or a connective of one of many languages ("or", "oder", "ou",
"或", "или", ...) splits into two or more answers ("Paris or Lyon", "Paris, Lyon", one per line),
unless a reference itself holds that kind of separator ("salt and pepper"), and several
\\boxed{} offered as alternatives (hedges.py has the rule). Token F1 would pay for hedging (three
guesses, one right: 0.5). Extra words are still F1's business: the right answer plus a stray word
lowers precision ("Paris banana" against "Paris": 0.67), and is never worth more than the right
answer alone.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .answer_part import answer_part, clip, several_boxed
from .characters import clean
from .hedges import alternatives
from .normalise import normalise
from .verdict import Verdict


@dataclass
class Match:
    reference: str
    score: float
    precision: float = 0.0
    recall: float = 0.0


def _comparable(text: str) -> list[str]:
    return normalise(text).split() or normalise(text, drop_articles=False).split()


def exact_match(prediction: str, reference: str) -> Match:
    pred, ref = _comparable(prediction), _comparable(reference)
    return Match(reference, 1.0 if pred and pred == ref else 0.0)


def token_f1(prediction: str, reference: str) -> Match:
    pred, ref = _comparable(prediction), _comparable(reference)
    common = sum((Counter(pred) & Counter(ref)).values())
    if not pred or not ref or not common:
        return Match(reference, 0.0)
    precision, recall = common / len(pred), common / len(ref)
    return Match(reference, 2 * precision * recall / (precision + recall), precision, recall)


def _says_something(part: str) -> bool:
    return bool(normalise(part))


def score_open_text(answer: str, references: list[str], mode: str) -> Verdict:
    answer, references = clean(answer), [clean(r) for r in references]
    part = answer_part(answer)
    method = "token F1, best reference" if mode == "f1" else "normalised exact match, any reference"
    detail = {"method": method, "answer_from": part.source, "extracted": clip(part.text),
              "normalised": clip(normalise(part.text)), "references": [clip(r) for r in references]}
    if not part.text:
        return Verdict(0.0, {**detail, "why": "no answer"})
    boxes = several_boxed(answer)
    several = ("boxes", boxes) if boxes else None
    if not several and not any(exact_match(part.text, ref).score for ref in references):  # a reference is no hedge
        several = alternatives(part.text, references, _says_something)
    if several:  # hedging: never scored as one of them
        how, parts = several
        detail["why"] = f"several answers ({how}): " + "; ".join(clip(p, 40) for p in parts[:10])
        return Verdict(0.0, {**detail, "f1": 0.0} if mode == "f1" else detail)
    compare = token_f1 if mode == "f1" else exact_match
    best = max((compare(part.text, ref) for ref in references), key=lambda m: m.score)
    detail["best_reference"] = clip(best.reference)
    if mode == "f1":
        detail.update(f1=best.score, precision=best.precision, recall=best.recall)
    return Verdict(best.score, detail)
