"""Scorers: one per file; `make_scorer` picks one from a task's settings."""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Optional

from ...models.base import ModelClient
from ..data import Row
from .base import Scorer, ScoreResult, last_boxed, strip_thinking

BUILTIN = ("math", "choice", "choice-reference", "ifbench", "judge", "exact", "rouge", "verifier")
MODULES = {"math": ("math_verify",), "ifbench": ("if_verifiable",), "rouge": ("rouge_score",)}  # of the bench extra


def modules_needed(name: str, offline: Optional[str] = None, judge: bool = False) -> tuple[str, ...]:
    """The optional modules the scorer `make_scorer(name, offline, judge)` gives will import."""
    if name == "judge":
        return () if judge else MODULES.get(offline or "exact", ())
    return MODULES.get(name, ())


class Approximation:
    """An offline stand-in for the LLM judge, labelled as such in every result."""

    approximate = True

    def __init__(self, inner: Scorer):
        self.inner = inner
        self.name = inner.name
        self.method = f"{inner.method} (offline approximation of the LLM judge)"

    async def score(self, answer: str, row: Row) -> ScoreResult:
        result = await self.inner.score(answer, row)
        result.method = self.method
        return result


class FunctionScorer:
    """A user's scorer: `module:function` taking (answer, row) and returning a score in
    [0, 1] (or a ScoreResult); may be async."""

    approximate = False

    def __init__(self, spec: str):
        module, _, attr = spec.partition(":")
        try:
            self.fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"scorer {spec!r}: {e}") from None
        self.name = self.method = spec

    async def score(self, answer: str, row: Row) -> ScoreResult:
        out = self.fn(answer, row)
        if inspect.isawaitable(out):
            out = await out
        return out if isinstance(out, ScoreResult) else ScoreResult(float(out), "", self.method)


def _builtin(name: str) -> Scorer:
    if name == "math":
        from .math import MathVerify
        return MathVerify()
    if name == "choice":
        from .choice import Choice
        return Choice()
    if name == "choice-reference":
        from .choice_reference import ChoiceReference
        return ChoiceReference()
    if name == "ifbench":
        from .ifbench import IFBench
        return IFBench()
    if name == "exact":
        from .exact import Exact
        return Exact()
    if name == "rouge":
        from .rouge import RougeL
        return RougeL()
    if name == "verifier":
        from .verifier import Verifier
        return Verifier()
    raise ValueError(f"unknown scorer {name!r}; built-in: {', '.join(BUILTIN)}, or module:function")


@dataclass
class JudgeSettings:
    client: ModelClient
    prompt: Optional[str] = None


def make_scorer(name: str, offline: Optional[str] = None, judge: Optional[JudgeSettings] = None) -> Scorer:
    if ":" in name:
        return FunctionScorer(name)
    if name == "judge":
        if judge is not None:
            from .judge import Judge
            return Judge(judge.client, judge.prompt)
        return Approximation(_builtin(offline or "exact"))
    return _builtin(name)


__all__ = ["BUILTIN", "JudgeSettings", "ScoreResult", "Scorer", "last_boxed", "make_scorer", "modules_needed",
           "strip_thinking"]
