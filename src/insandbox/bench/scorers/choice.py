"""choice: the letter of a multiple-choice answer, compared exactly with the gold letter."""
from __future__ import annotations

import re
from typing import Optional

from ..data import Row
from .base import ScoreResult, last_boxed, strip_thinking

_LETTER = r"\(?\*{0,2}([A-Z])\*{0,2}\)?"
# most explicit first; the last match of the first pattern that matches wins
_PATTERNS = [
    re.compile(r'"answer"\s*:\s*"?' + _LETTER, re.I),
    re.compile(r"(?:final\s+)?answer\s*(?:is|:)\s*\**\s*(?:option\s+)?" + _LETTER + r"(?![A-Za-z])", re.I),
    re.compile(r"(?:the\s+)?correct\s+(?:option|answer|choice)\s+is\s+" + _LETTER + r"(?![A-Za-z])", re.I),
]


def extract_choice(text: str) -> Optional[str]:
    text = strip_thinking(text)
    boxed = last_boxed(text)
    if boxed is not None:
        m = re.fullmatch(r"\s*(?:\\text\{)?\(?([A-Za-z])\)?\}?\s*", boxed)
        if m:
            return m.group(1).upper()
    for pattern in _PATTERNS:
        found = pattern.findall(text)
        if found:
            return found[-1].upper()
    stripped = text.strip()
    m = re.fullmatch(r"\(?([A-Za-z])\)?[.:)]?", stripped)  # the answer is just the letter
    if m:
        return m.group(1).upper()
    lines = [ln.strip() for ln in stripped.splitlines() if ln.strip()]
    if lines:  # the last line starts with an option mark: "C. Ethanol", "(C) Ethanol", "C)" ("I think" is no answer)
        m = re.match(r"(?:\(([A-Z])\)|([A-Z])[.:)])(?:\s|$)", lines[-1])
        if m:
            return m.group(1) or m.group(2)
    return None


class Choice:
    name = "choice"
    method = "choice letter, exact match"
    approximate = False

    async def score(self, answer: str, row: Row) -> ScoreResult:
        gold = extract_choice(row.ground_truth) or row.ground_truth.strip().upper()
        pred = extract_choice(answer or "")
        if pred is None:
            return ScoreResult(0.0, "", self.method, {"why": "no choice letter found"})
        return ScoreResult(1.0 if pred == gold else 0.0, pred, self.method)
