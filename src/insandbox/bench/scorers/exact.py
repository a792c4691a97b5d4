"""exact: the answer equals the ground truth, ignoring case and runs of whitespace."""
from __future__ import annotations

from ..data import Row
from .base import ScoreResult, normalize, strip_thinking


class Exact:
    name = "exact"
    method = "exact match (case and whitespace ignored)"
    approximate = False

    async def score(self, answer: str, row: Row) -> ScoreResult:
        pred = normalize(strip_thinking(answer))
        return ScoreResult(1.0 if pred and pred == normalize(row.ground_truth) else 0.0, pred, self.method)
