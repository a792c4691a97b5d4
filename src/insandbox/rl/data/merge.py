"""Multi-choice by merging: several single-choice questions on one material become one
"which of these statements are true? select all that apply" question.

Each question gives one statement: its correct option (a true statement) or one of its wrong
options (a false one), drawn half and half, with at least one true statement. A cloze question
takes the option into its blank ("He went home because ___." -> "He went home because it
rained."); any other question reads 'The answer to "Q" is "O".'. The wrong options are wrong by
the source's own key, so no statement is true by accident.
"""
from __future__ import annotations

import random
import re

from .items import Form, Item
from .text import one_line, tidy_question

MIN_STATEMENTS = 3
MAX_STATEMENTS = 6
# options that lean on the other options mean nothing on their own
_REFERS_TO_OTHERS = re.compile(r"\b(?:all|none|both|neither|either) of (?:the )?(?:above|them|these)\b|"
                               r"\b(?:all|none) the above\b|\b[A-D] (?:and|or|&) [A-D]\b|\bboth [A-D]\b", re.I)


def can_merge(form: Form) -> bool:
    """A single-choice question that makes sense as a stand-alone statement."""
    return (form.qa_type == "single-choice" and len(form.correct) == 1 and len(form.choices) >= 2
            and all(isinstance(c, str) and c.strip() and not _REFERS_TO_OTHERS.search(c) for c in form.choices)
            and form.question.count("___") <= 1)


def statement(question: str, option: str) -> str:
    option = one_line(option)
    if "___" in question:
        before, after = question.split("___", 1)
        if re.match(r"\s*[.?!]", after):
            option = option.rstrip(".!?")
        text = one_line(f"{before} {option} {after}")
        text = tidy_question(re.sub(r" ([.,;:?!])", r"\1", text))
        return text[:1].upper() + text[1:]
    return f'The answer to "{one_line(question)}" is "{option.rstrip(".")}".'


def merge(items: list[Item], material: str, rng: random.Random) -> Form:
    """One multi-choice form from the single-choice forms of `items` (same material, in order)."""
    forms = [next(f for f in it.forms if can_merge(f)) for it in items]
    truth = [rng.random() < 0.5 for _ in forms]
    if not any(truth):
        truth[rng.randrange(len(truth))] = True
    statements = []
    for form, true in zip(forms, truth):
        wrong = [i for i in range(len(form.choices)) if i not in form.correct]
        pick = form.correct[0] if true else rng.choice(wrong)
        statements.append(statement(form.question, str(form.choices[pick])))
    return Form("multi-choice", f"Which of the following statements about the {material} are true?",
                choices=statements, correct=[i for i, t in enumerate(truth) if t])
