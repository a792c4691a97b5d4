"""choice-reference: the reference implementation's lenient letter extraction (llm-in-sandbox 0.2.0).

Reproduces how the paper's numbers were scored, for comparison only: it gives credit the
strict `choice` scorer refuses (a SMILES string "C1CC..." reads as C, a reply that only lists
the options reads as its last letter, letters outside the options count). It sees the whole
answer, thinking included, as the reference does.

Full marks at once when the whole answer equals the gold (case and surrounding space ignored);
else the first of these that finds a letter, compared with the gold:
1. `"answer": "X"`; 2. `answer: X`; 3. `answer is X` / `choice is X` (first match of each);
4. the first character of the last \\boxed{}, if a letter; 5. the last standalone letter of
the upper-cased text; 6. the first character of the answer, if a letter.
"""
from __future__ import annotations

import re
from typing import Optional

from ..data import Row
from .base import ScoreResult

_FIRST_MATCH = [
    re.compile(r'"answer"\s*:\s*"([A-Z])"', re.I),
    re.compile(r"answer\s*[:：]\s*([A-Z])\b", re.I),
    re.compile(r"(?:answer|choice)\s+is\s+([A-Z])\b", re.I),
]


def _last_boxed_only(text: str) -> Optional[str]:
    """The content of the last \\boxed{ when its braces close; None otherwise (an earlier one is not tried)."""
    start = text.rfind("\\boxed{")
    if start == -1:
        return None
    i, depth = start + len("\\boxed{"), 1
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[start + len("\\boxed{"):i - 1].strip() if depth == 0 else None


def reference_letter(text: str) -> str:
    """The reference's letter for a reply; "" when it finds none."""
    if not text:
        return ""
    for pattern in _FIRST_MATCH:
        m = pattern.search(text)
        if m:
            return m.group(1).upper()
    boxed = _last_boxed_only(text)
    if boxed and boxed[0].upper().isalpha():
        return boxed[0].upper()
    standalone = re.findall(r"\b([A-Z])\b", text.upper())
    if standalone:
        return standalone[-1]
    stripped = text.strip()
    if stripped and stripped[0].upper().isalpha():
        return stripped[0].upper()
    return ""


def reference_verdict(answer: str, gold: str) -> tuple[float, str]:
    """(score, letter) as the reference scores `answer` against the gold letter."""
    answer, gold = answer or "", gold.strip().upper()
    if answer.strip().upper() == gold:
        return 1.0, gold
    letter = reference_letter(answer)
    return (1.0 if letter.strip().upper() == gold else 0.0), letter


class ChoiceReference:
    name = "choice-reference"
    method = "choice letter, reference extraction (llm-in-sandbox 0.2.0)"
    approximate = False

    async def score(self, answer: str, row: Row) -> ScoreResult:
        from .choice import both_verdicts

        score, letter = reference_verdict(answer, row.ground_truth)
        detail = {"extractions": both_verdicts(answer, row)}
        if not letter:
            detail["why"] = "no choice letter found"
        return ScoreResult(score, letter, self.method, detail)
