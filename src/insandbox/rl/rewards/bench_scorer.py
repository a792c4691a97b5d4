"""The RL rewards as a benchmark scorer, so `insandbox bench` scores held-out context tasks the
way training did (before and after):

    insandbox bench examples/rl/context_tasks.yaml --data tasks/heldout.jsonl --gguf trained.gguf

A bench task names it as `scorer: insandbox.rl.rewards.bench_scorer:score`. The score is the
reward's correctness (0..1, without training penalties): a benchmark measures answers, not
episode shape.
"""
from __future__ import annotations

from typing import Any

from . import Outcome, compute_reward


async def score(answer: str, row: Any) -> Any:
    from ...bench.scorers import ScoreResult

    fields = {"id": row.id, "problem_statement": row.problem_statement, "ground_truth": row.ground_truth,
              "qa_type": row.qa_type or "open", "domain": row.domain, **row.extra}
    result = await compute_reward(fields, Outcome(answer=answer, exit_reason="submitted"))
    if result.error:  # not scorable (a broken row, a scorer timeout): reported apart, never as wrong
        return ScoreResult(None, "", "insandbox.rl.rewards", {"error": result.error, **result.detail})
    extracted = result.detail.get("extracted") or result.detail.get("letters") or ""
    return ScoreResult(result.correct, str(extracted), f"insandbox.rl.rewards ({fields['qa_type']})", result.detail)
