"""Open answers: normalised exact match, or token F1, against the ground truth and every alias
(the best one counts). Numbers (`answer_type` "number") go to numbers.py instead.

The answer part is found first (answer_part.py: thinking dropped, last \\boxed{}, "Answer:"
label). Text that is nothing but articles ("The") keeps them, so such a reference can still be
matched; a reference that is nothing but punctuation can never be.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .answer_part import answer_part, clip
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


def score_open_text(answer: str, references: list[str], mode: str) -> Verdict:
    part = answer_part(answer)
    method = "token F1, best reference" if mode == "f1" else "normalised exact match, any reference"
    detail = {"method": method, "answer_from": part.source, "extracted": clip(part.text),
              "normalised": clip(normalise(part.text)), "references": [clip(r) for r in references]}
    if not part.text:
        return Verdict(0.0, {**detail, "why": "no answer"})
    compare = token_f1 if mode == "f1" else exact_match
    best = max((compare(part.text, ref) for ref in references), key=lambda m: m.score)
    detail["best_reference"] = clip(best.reference)
    if mode == "f1":
        detail.update(f1=best.score, precision=best.precision, recall=best.recall)
    return Verdict(best.score, detail)
