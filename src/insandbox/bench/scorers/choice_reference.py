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

from ..data import Row
from .base import ScoreResult
from .choice import both_verdicts
from .reference_extraction import reference_letter, reference_verdict  # noqa: F401 (reference_letter: tests')


class ChoiceReference:
    name = "choice-reference"
    method = "choice letter, reference extraction (llm-in-sandbox 0.2.0)"
    approximate = False

    async def score(self, answer: str, row: Row) -> ScoreResult:
        score, letter = reference_verdict(answer, row.ground_truth)
        detail = {"extractions": both_verdicts(answer, row)}
        if not letter:
            detail["why"] = "no choice letter found"
        return ScoreResult(score, letter, self.method, detail)
