"""In-context examples: for each task, the nearest earlier tasks of the same source (in output
order, wrapping round to the end for the first ones) that are asked the same way.

An example is never the task itself nor on the same material (it would hint at the answer),
never the same question with the same options (a duplicate in the source), and for an open
question never has an answer the task accepts.
"""
from __future__ import annotations

from .items import PartRef
from .tasks import Task
from .text import normalise_answer


def _kind(task: Task) -> tuple[str, str]:
    return task.form.qa_type, task.form.answer_type


def _signature(task: Task) -> tuple:
    """The question and its options as written (a duplicate in a source is a copy)."""
    choices = tuple(task.parts[c.index].text if isinstance(c, PartRef) else c for c in task.form.choices)
    return task.form.question, choices


def _accepted(task: Task) -> set[str]:
    return {normalise_answer(a) for a in task.form.answers} if task.form.qa_type == "open" else set()


def pick_examples(tasks: list[Task], count: int) -> list[list[int]]:
    """For each task, the indices of its examples (nearest first)."""
    if count <= 0:
        return [[] for _ in tasks]
    signatures = [_signature(t) for t in tasks]
    accepted = [_accepted(t) for t in tasks]
    picked = []
    for i, task in enumerate(tasks):
        chosen: list[int] = []
        for step in range(1, len(tasks)):
            j = (i - step) % len(tasks)
            other = tasks[j]
            if (_kind(other) != _kind(task) or other.context == task.context or signatures[j] == signatures[i]
                    or accepted[j] & accepted[i]):
                continue
            chosen.append(j)
            if len(chosen) == count:
                break
        picked.append(chosen)
    return picked
