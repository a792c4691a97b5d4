"""math: math-verify on the last \\boxed{} of the answer (the whole answer when it has none)."""
from __future__ import annotations

from ..data import Row
from .base import ScoreResult, last_boxed, strip_thinking


def verify_boxed(gold: str, pred: str) -> bool:
    from math_verify import parse, verify

    # math-verify's timeouts use SIGALRM, which only works on the main thread: scoring runs there
    return bool(verify(parse("\\boxed{" + gold + "}"), parse("\\boxed{" + pred + "}")))


class MathVerify:
    name = "math"
    method = "math-verify on the last \\boxed{}"
    approximate = False

    def __init__(self):
        import math_verify  # noqa: F401  (missing, it would fail every answer below, each scored 0 as wrong)

    async def score(self, answer: str, row: Row) -> ScoreResult:
        text = strip_thinking(answer)
        pred = last_boxed(text)
        pred = text.strip() if pred is None else pred
        gold = last_boxed(row.ground_truth)
        gold = row.ground_truth.strip() if gold is None else gold
        if not pred:
            return ScoreResult(0.0, "", self.method, {"why": "no answer"})
        try:
            ok = verify_boxed(gold, pred)
        except Exception as e:  # a parser crash on odd input is a wrong answer, said so
            return ScoreResult(0.0, pred, self.method, {"why": f"math-verify failed: {type(e).__name__}: {e}"})
        return ScoreResult(1.0 if ok else 0.0, pred, self.method)
