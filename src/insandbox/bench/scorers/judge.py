"""judge: an LLM decides whether the answer agrees with the reference answer.

The protocol of the paper's judge: the judge model sees the question (for context),
the reference answer and the candidate (with any thinking removed), and replies
CORRECT or INCORRECT; the last of those words in its reply is the verdict. The prompt
below is ours; `--judge-prompt FILE` replaces it (placeholders {question},
{ground_truth}, {answer}) to reproduce a published prompt exactly.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from ...models.base import ModelClient, ModelError
from ..data import Row
from .base import ScoreResult, strip_thinking

JUDGE_PROMPT = """You are grading an answer against the official answer to a question.

Question (context only, do not solve it yourself):
{question}

Official answer:
{ground_truth}

Answer to grade:
{answer}

The answer to grade is CORRECT if it states the same result as the official answer (allowing
for equivalent forms, rounding in the last digit and different but equivalent wording), and
INCORRECT if it differs, is incomplete, or hedges between several results.
Reply with one word: CORRECT or INCORRECT."""

_VERDICT = re.compile(r"\b(INCORRECT|CORRECT)\b")


def verdict_of(text: str) -> Optional[str]:
    found = _VERDICT.findall((text or "").upper())
    return found[-1] if found else None


class Judge:
    name = "judge"
    approximate = False

    def __init__(self, client: ModelClient, prompt: Optional[str] = None):
        self.client = client
        self.prompt = prompt or JUDGE_PROMPT
        self.method = f"LLM judge ({client.name})"
        self._cache: dict[tuple[str, str, str], ScoreResult] = {}

    @classmethod
    def prompt_from_file(cls, path: Optional[Path]) -> Optional[str]:
        return Path(path).read_text(encoding="utf-8") if path else None

    async def score(self, answer: str, row: Row) -> ScoreResult:
        candidate = strip_thinking(answer)
        if not candidate:
            return ScoreResult(0.0, "", self.method, {"why": "no answer"})
        key = (row.problem_statement, row.ground_truth, candidate)
        if key in self._cache:
            return self._cache[key]
        text = (self.prompt.replace("{question}", row.problem_statement)
                .replace("{ground_truth}", row.ground_truth).replace("{answer}", candidate))
        verdict, reply_text = None, ""
        for _ in range(2):  # one more try when the judge answers neither word
            try:
                reply = await self.client.complete([{"role": "user", "content": text}], None)
            except ModelError as e:
                return ScoreResult(None, candidate[:300], self.method, {"why": f"judge failed: {e}"})
            reply_text = strip_thinking(reply.content or "") or (reply.content or "")
            verdict = verdict_of(reply_text)
            if verdict:
                break
        if verdict is None:
            return ScoreResult(None, candidate[:300], self.method, {"why": "no verdict", "judge": reply_text[-300:]})
        result = ScoreResult(1.0 if verdict == "CORRECT" else 0.0, candidate[:300], self.method,
                             {"verdict": verdict})
        self._cache[key] = result
        return result
