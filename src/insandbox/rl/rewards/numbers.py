"""Numeric open answers (`answer_type` "number"): math-verify on the one number the answer states.

The answer part (answer_part.py) must state exactly one number, so hedging gets no credit:
- accepted: "42", "42.0", "+42", "$42", "$42$", "\\boxed{42}", "42 apples", "about 42", "x = 42",
  "1,000" (= 1000), "4.2e1", "84/2", "\\frac{84}{2}", "42%" (a percent sign is ignored on both
  sides: "42%" equals "42", not "0.42");
- refused: "41 or 42", "between 40 and 45" (several numbers), "2 \\lor 3", "x=2 \\vee x=3",
  "3 \\land 4", "2 \\cup 3" (values joined by a logical or set connective, which math-verify would
  otherwise read as one of them), "\\boxed{2} or \\boxed{3}" (several boxes offered as
  alternatives), "forty-two" (no number), unless a reference says the same in words (every
  answer is also compared with every reference by normalised exact match).
Text with LaTeX commands left after unwrapping (\\frac, \\sqrt, ...) goes to math-verify whole.
math-verify's own timeouts are off (they use SIGALRM and cannot stop C code): the caller bounds
the time (isolation.py runs this in a process it can kill).
"""
from __future__ import annotations

import re
import unicodedata
from typing import Optional

from .answer_part import CONNECTIVES, answer_part, clip, several_boxed, unwrap_latex_text
from .normalise import normalise
from .verdict import Verdict

_INTEGER = r"\d{1,3}(?:,\d{3})+(?!\d)|\d+"
_DECIMAL = rf"(?:{_INTEGER})(?:\.\d+)?|\.\d+"
# one number as written: sign, thousands commas, decimals, a fraction a/b, an exponent, a percent sign
_NUMBER = re.compile(rf"(?<![\w.])(?P<sign>[-+]?)(?P<num>{_DECIMAL})(?:/(?P<den>{_DECIMAL}))?"
                     rf"(?:[eE](?P<exp>[-+]?\d+))?%?")
_LATEX_SPACING = re.compile(r"\\(?:[,;:! ]|quad|qquad)")
_MATH_DELIMITERS = re.compile(r"\$|\\\(|\\\)|\\\[|\\\]")
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\uFE63": "-", "\uFF0D": "-"})


def _as_latex(m: re.Match) -> str:
    def plain(x: str) -> str:
        return x.replace(",", "")

    text = m.group("sign").replace("+", "") + plain(m.group("num"))
    if m.group("den"):
        text = f"\\frac{{{text}}}{{{plain(m.group('den'))}}}"
    if m.group("exp"):
        text = f"{text}\\times 10^{{{int(m.group('exp'))}}}"
    return text


def read_number(text: str) -> tuple[Optional[str], str]:
    """(what math-verify compares, or None; how it was read or why not)."""
    text = unicodedata.normalize("NFKC", text).translate(_MINUS_SIGNS)
    text = _LATEX_SPACING.sub(" ", unwrap_latex_text(text)).replace("\\%", "%").replace("\\$", "$")
    text = _MATH_DELIMITERS.sub(" ", text).strip().rstrip(".")
    if "\\" in text:
        if CONNECTIVES.search(text):  # "2 \\lor 3": a hedge, which math-verify scores as its last value
            return None, "values joined by a connective (or, and, \\lor, \\vee, \\cup...): alternatives"
        return text, "LaTeX, compared whole"
    found = list(_NUMBER.finditer(text))
    if not found:
        return None, "no number"
    if len(found) > 1:
        return None, "several numbers: " + ", ".join(clip(m.group(0), 40) for m in found[:10])
    return _as_latex(found[0]), "one number"


def _math_verify_equal(gold: str, pred: str) -> bool:
    from math_verify import parse, verify

    parsed_gold = parse("\\boxed{" + gold + "}", parsing_timeout=None)
    parsed_pred = parse("\\boxed{" + pred + "}", parsing_timeout=None)
    return bool(parsed_gold and parsed_pred and verify(parsed_gold, parsed_pred, timeout_seconds=None))


def score_number(answer: str, references: list[str]) -> Verdict:
    part = answer_part(answer)
    pred, how = read_number(part.text)
    detail = {"method": "math-verify on the one number stated (or normalised exact match with a reference)",
              "answer_from": part.source, "extracted": clip(part.text), "read_as": pred and clip(pred),
              "read": how, "references": [clip(r) for r in references]}
    if not part.text:
        return Verdict(0.0, {**detail, "why": "no answer"})
    boxes = several_boxed(answer)
    if boxes:  # the last box would win: "\\boxed{2} or \\boxed{3}" is two guesses, not "3"
        return Verdict(0.0, {**detail, "why": "several boxed answers: " + ", ".join(clip(b, 40) for b in boxes[:10])})
    said = normalise(part.text)
    for ref in references:
        if said and said == normalise(ref):
            return Verdict(1.0, {**detail, "matched": clip(ref), "matched_by": "normalised exact match"})
    if pred is None:
        return Verdict(0.0, {**detail, "why": how})
    for ref in references:
        gold, _ = read_number(ref)
        if gold is not None and _math_verify_equal(gold, pred):
            return Verdict(1.0, {**detail, "matched": clip(ref), "matched_by": "math-verify"})
    return Verdict(0.0, {**detail, "why": "not equal to any reference"})
