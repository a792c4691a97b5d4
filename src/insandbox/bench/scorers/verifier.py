"""`verifier`: the score is what a task's own verifier said after looking at the sandbox (a Harbor
task's tests/test.sh: bench/harbor/verifier.py). There is no answer to compare: the sample runner
takes the reward from the run's verification (bench/sample.py), so `score` is never asked."""
from __future__ import annotations

from ..data import Row
from .base import ScoreResult


class Verifier:
    name = "verifier"
    method = "the task's verifier (tests/test.sh's reward)"
    approximate = False

    async def score(self, answer: str, row: Row) -> ScoreResult:
        return ScoreResult(None, "", self.method, {"why": "scored by the task's verifier, which did not run"})
