"""Outcome rewards for context tasks: one scorer per qa_type, optional penalties, and a
computation that can neither hang nor raise (the trainer must never stall on a reward).

    result = await compute_reward(row, Outcome(answer="C\\n", exit_reason="submitted"), RewardConfig())
    result.value        # what the trainer optimises (correctness plus penalties)
    result.correct      # 0..1 before penalties
    result.detail       # what was compared, which penalties applied, an error if scoring failed

Implementation: see the modules of this package (one per qa_type).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from pydantic import BaseModel, Field


class RewardConfig(BaseModel):
    multi_choice: Literal["exact", "f1"] = "exact"  # exact set of letters, or set F1
    open: Literal["exact", "f1"] = "exact"  # normalised exact match, or token F1 (best alias)
    no_answer_penalty: float = 0.0  # added when the sandbox holds no answer file
    max_steps_penalty: float = 0.0  # added when the episode ran out of steps (or was stuck)
    truncation_penalty: float = 0.0  # added when the response ran out of tokens
    timeout_s: float = Field(default=10.0, gt=0)  # a scorer taking longer gives error_value
    error_value: float = 0.0  # the value when scoring failed or timed out


@dataclass
class Outcome:
    """How an episode ended, as far as the reward is concerned."""

    answer: Optional[str]  # the answer file's text; None when there was none
    exit_reason: str  # an insandbox.ExitReason value
    truncated: bool = False  # the response hit its token budget


@dataclass
class RewardResult:
    value: float
    correct: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)
    error: Optional[str] = None


async def compute_reward(row: dict, outcome: Outcome, config: Optional[RewardConfig] = None) -> RewardResult:
    raise NotImplementedError("filled in by the rewards implementation")
