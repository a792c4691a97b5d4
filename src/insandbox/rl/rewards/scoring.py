"""One answer's correctness: picks the scorer for the row's qa_type (and answer_type).

    single-choice  single_choice.py  the strict choice letter among the row's options
    multi-choice   multi_choice.py   exact letter set, or set F1 (config.multi_choice = "f1")
    open, text     open_answer.py    normalised exact match, or token F1 (config.open = "f1"), best alias
    open, number   numbers.py        math-verify, any alias
    (scoring="paper": paper.py, the official LLM-in-Sandbox-RL reward, for every qa_type)

Every answer and reference goes through characters.clean first (invisible characters, full-width
forms, other scripts' digits, one minus sign, superscripts, fractions, digit groups), so "Ａ", "٤٢",
"Par\u200bis" and "–3" are read as "A", "42", "Paris" and "-3" by every scorer alike.

A broken row (ground truth that is no letter, options that miss the ground truth, an unknown
qa_type) raises: the caller turns that into an error result, never into a silent 0.
This is what worker processes run (isolation.py), so it takes and returns JSON-able values.
"""
from __future__ import annotations

import logging
from typing import Any

from .characters import clean
from .multi_choice import score_multi_choice
from .numbers import score_number
from .open_answer import score_open_text
from .paper import score_paper
from .single_choice import score_single_choice
from .verdict import Verdict

# the row fields scoring reads; the rest (documents, the prompt) never travel to a worker
SCORED_FIELDS = ("qa_type", "ground_truth", "options", "aliases", "answer_type", "problem_statement")


def _text(value: Any, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{what} must be text, got {value!r:.80}")
    return str(value)


def references(fields: dict) -> list[str]:
    """The ground truth, then every alias."""
    aliases = fields.get("aliases") or []
    if not isinstance(aliases, (list, tuple)):
        raise ValueError(f"aliases must be a list, got {aliases!r:.80}")
    return [clean(_text(fields.get("ground_truth"), "ground_truth"))] + [clean(_text(a, "an alias")) for a in aliases]


def score_answer(fields: dict, answer: str, multi_choice: str = "exact", open_mode: str = "exact",
                 scoring: str = "strict") -> Verdict:
    qa_type = fields.get("qa_type") or "open"  # the row schema's default
    answer = clean(answer)
    if scoring == "paper":
        verdict = score_paper(fields, answer, references(fields) if qa_type == "open" else [])
    elif scoring != "strict":
        raise ValueError(f"unknown scoring {scoring!r:.40} (strict or paper)")
    elif qa_type == "single-choice":
        verdict = score_single_choice(answer, fields.get("ground_truth"), fields.get("options"),
                                      fields.get("problem_statement") or "")
    elif qa_type == "multi-choice":
        verdict = score_multi_choice(answer, fields.get("ground_truth"), fields.get("options"),
                                     fields.get("problem_statement") or "", multi_choice)
    elif qa_type == "open":
        answer_type = fields.get("answer_type") or "text"
        if answer_type == "number":
            verdict = score_number(answer, references(fields))
        elif answer_type == "text":
            verdict = score_open_text(answer, references(fields), open_mode)
        else:
            raise ValueError(f"unknown answer_type {answer_type!r:.40} (text or number)")
    else:
        raise ValueError(f"unknown qa_type {qa_type!r:.40} (single-choice, multi-choice or open)")
    verdict.detail = {"qa_type": qa_type, **verdict.detail}
    return verdict


def warm_up() -> None:
    """Run by each worker before its first request: math-verify's import and first comparison take
    about a second, which must not count against a request's timeout."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns that its own timeouts are off
    score_number("1", ["1.0"])


def score_in_worker(fields: dict, answer: str, multi_choice: str, open_mode: str, scoring: str = "strict") -> dict:
    """score_answer as JSON, for isolation.WorkerPool."""
    verdict = score_answer(fields, answer, multi_choice, open_mode, scoring)
    return {"correct": verdict.correct, "detail": verdict.detail}
