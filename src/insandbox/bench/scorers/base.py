"""What a scorer is, and the text helpers scorers share."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional, Protocol

from ..data import Row


@dataclass
class ScoreResult:
    score: Optional[float]  # 0..1; None: this answer could not be scored (reported apart, never as wrong)
    extracted: str = ""  # what the scorer compared with the ground truth
    method: str = ""  # e.g. "math-verify", "rouge-L (offline approximation of the LLM judge)"
    detail: dict = field(default_factory=dict)


class Scorer(Protocol):
    name: str
    method: str  # how scores are computed, for the summary and the report
    approximate: bool  # True: a stand-in for the paper's scoring (no judge given)

    async def score(self, answer: str, row: Row) -> ScoreResult: ...


def strip_thinking(text: str) -> str:
    """The answer part of a reply from a reasoning model (after </think>)."""
    text = text or ""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1].strip()
    if text.lstrip().startswith("<think>"):
        return ""
    return text.strip()


def last_boxed(text: str) -> Optional[str]:
    """The content of the last \\boxed{...} (nested braces allowed), or None."""
    start = text.rfind("\\boxed{")
    while start != -1:
        i, depth = start + len("\\boxed{"), 1
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start + len("\\boxed{"):i - 1].strip()
        start = text.rfind("\\boxed{", 0, start)
    return None


def normalize(text: str) -> str:
    return re.sub(r"\s+", " ", (text or "").strip().casefold())
