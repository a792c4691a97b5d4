"""Numeric open answers (`answer_type` "number"): math-verify on the one number the answer states.

The answer is cleaned first (characters.py: one form of signs, digits, superscripts, fractions and
digit groups for every reader). The answer part (answer_part.py) must state exactly one number,
so hedging gets no credit:
- accepted: "42", "42.0", "+42", "$42", "$42$", "\\boxed{42}", "42 apples", "about 42", "x = 42",
  "1,000" and "1 000" with a thin space (= 1000), "4.2e1", "4.2 × 10^1", "10^3", "2²" (= 4),
  "84/2", "\\frac{84}{2}", "½", "1½" (= 3/2), "42%" (a percent sign is ignored on both sides:
  "42%" equals "42", not "0.42"); "–3", "‒3", "‐3", "−3" are all -3;
- refused: "41 or 42", "between 40 and 45", "1 000" with a plain space (several numbers), "±3",
  "2 \\lor 3", "x=2 \\vee x=3", "2 \\mid 3", "2 \\to 3", "2 = 3" (values.py: whatever math-verify
  would read as one of several values), "\\boxed{2} or \\boxed{3}" (several boxes offered as
  alternatives), "forty-two" (no number), unless a reference says the same in words (every
  answer is also compared with every reference by normalised exact match).
Text with LaTeX commands left after unwrapping (\\frac, \\sqrt, ...) goes to math-verify whole,
when it states one value and every command and sign in it is arithmetic (values.py).
math-verify's own timeouts are off (they use SIGALRM and cannot stop C code): the caller bounds
the time (isolation.py runs this in a process it can kill).
"""
from __future__ import annotations

import re
from typing import Optional

from .answer_part import answer_part, clip, several_boxed, unwrap_latex_text
from .characters import clean
from .normalise import normalise
from .values import not_arithmetic, several_values
from .verdict import Verdict

_INTEGER = r"\d{1,3}(?:,\d{3})+(?!\d)|\d+"
_DECIMAL = rf"(?:{_INTEGER})(?:\.\d+)?|\.\d+"


def _power(name: str) -> str:
    return r"\^\{?(?P<" + name + r">[-+]?\d+)\}?"


# one number as written: sign, thousands commas, decimals, a power, a fraction a/b, an exponent
# (4.2e1, 4.2 × 10^1), a percent sign; never the start or the end of a longer one ("1.000.000")
_NUMBER = re.compile(rf"(?<![\w.])(?P<sign>[-+]?)(?P<num>{_DECIMAL})(?:{_power('pow')})?"
                     rf"(?:/(?P<den>{_DECIMAL}))?"
                     rf"(?:[eE](?P<exp>[-+]?\d+)|\s*[×x*·⋅]\s*10{_power('exp10')})?(?!\.?\d)%?")
_PLUS_MINUS = re.compile(r"[±∓]")
# digits left once the numbers are read: glued to a word ("or4") or a number's index ("10_2"), except a
# variable's index or a power ("x_1", "x^2")
_GLUED_DIGITS = re.compile(r"(?<![\d^])(?<![^\W\d]_)\d+")
_LATEX_SPACING = re.compile(r"\\(?:[,;:! ]|quad|qquad)")
_MATH_DELIMITERS = re.compile(r"\$|\\\(|\\\)|\\\[|\\\]")


def _as_latex(m: re.Match) -> str:
    def plain(x: str) -> str:
        return x.replace(",", "")

    text = m.group("sign").replace("+", "") + plain(m.group("num"))
    if m.group("pow"):
        text = f"{text}^{{{int(m.group('pow'))}}}"
    if m.group("den"):
        text = f"\\frac{{{text}}}{{{plain(m.group('den'))}}}"
    exponent = m.group("exp") or m.group("exp10")
    if exponent:
        text = f"{text}\\times 10^{{{int(exponent)}}}"
    return text


def read_number(text: str) -> tuple[Optional[str], str]:
    """(what math-verify compares, or None; how it was read or why not)."""
    text = _LATEX_SPACING.sub(" ", unwrap_latex_text(clean(text))).replace("\\%", "%").replace("\\$", "$")
    text = _MATH_DELIMITERS.sub(" ", text).strip().rstrip(".")
    if "\\" in text:
        several = several_values(text)
        if several:  # "2 \\lor 3", "2 \\mid 3": a hedge, which math-verify would score as one of its values
            return None, several
        other = not_arithmetic(text)
        if other:
            return None, f"{other!r} is not arithmetic"
        return text, "LaTeX, compared whole"
    if _PLUS_MINUS.search(text):
        return None, "± states two values"
    found = list(_NUMBER.finditer(text))
    if not found:
        return None, "no number"
    glued = _GLUED_DIGITS.findall(_NUMBER.sub(" ", text))
    if len(found) > 1 or glued:  # "3または4", "3 or4": a number glued to a word is still a number
        return None, "several numbers: " + ", ".join(clip(m, 40) for m in ([m.group(0) for m in found] + glued)[:10])
    return _as_latex(found[0]), "one number"


def _math_verify_equal(gold: str, pred: str) -> bool:
    from math_verify import parse, verify

    parsed_gold = parse("\\boxed{" + gold + "}", parsing_timeout=None)
    parsed_pred = parse("\\boxed{" + pred + "}", parsing_timeout=None)
    return bool(parsed_gold and parsed_pred and verify(parsed_gold, parsed_pred, timeout_seconds=None))


def score_number(answer: str, references: list[str]) -> Verdict:
    answer, references = clean(answer), [clean(r) for r in references]
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
