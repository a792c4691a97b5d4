"""The reference implementation's lenient letter extraction (llm-in-sandbox 0.2.0), on its own: the
`choice-reference` scorer and the strict `choice` scorer's side-by-side verdicts both read it.
See choice_reference.py for what it extracts and why."""
from __future__ import annotations

import re
from typing import Optional

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
