"""rouge: ROUGE-L F1 between the answer and the reference (rouge-score, stemmed).

Used for long-context QA when no judge model is given: an offline approximation of the
paper's LLM judge, labelled as such everywhere it is reported.
"""
from __future__ import annotations

from ..data import Row
from .base import ScoreResult, strip_thinking


class RougeL:
    name = "rouge"
    method = "ROUGE-L F1"
    approximate = False

    def __init__(self):
        from rouge_score import rouge_scorer

        self._scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)

    async def score(self, answer: str, row: Row) -> ScoreResult:
        pred = strip_thinking(answer)
        if not pred:
            return ScoreResult(0.0, "", self.method, {"why": "no answer"})
        f1 = self._scorer.score(row.ground_truth, pred)["rougeL"].fmeasure
        return ScoreResult(round(f1, 6), pred[:500], self.method)
