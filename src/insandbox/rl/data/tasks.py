"""From a source's items to tasks: filter, merge several questions on one material into a
multi-choice question, and pick the form each remaining item is asked in.

Every draw is seeded by the seed and the item (or material) it is about, never by its
position, so a task comes out the same whatever --limit or the other items are.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Optional

from .items import Form, Item, Part, Skips
from .merge import MAX_STATEMENTS, MIN_STATEMENTS, can_merge, merge
from .settings import Settings
from .sources.reader import Reader


@dataclass
class Task:
    source: str
    uid: str
    context: str
    parts: list[Part]
    form: Form
    ordered: bool = False
    handle: Optional[str] = None
    origin: str = ""

    @property
    def id(self) -> str:
        return f"{self.source}-{self.uid}"


def seeded(settings: Settings, *about: str) -> random.Random:
    """A generator for one decision, seeded by the seed and what the decision is about."""
    return random.Random(":".join((str(settings.seed),) + about))


def fit_answer(form: Form, settings: Settings) -> Optional[Form]:
    """The form with a gold answer of at most max_answer_words (the first accepted answer that
    short; the others stay aliases), or None when every accepted answer is longer."""
    if form.qa_type != "open" or form.answer_type == "number":
        return form
    short = [a for a in form.answers if len(a.split()) <= settings.max_answer_words]
    if not short:
        return None
    return replace(form, answers=[short[0]] + [a for a in form.answers if a != short[0]])


def _task(item: Item, source: str, form: Form, uid: Optional[str] = None, origin: Optional[str] = None) -> Task:
    return Task(source, uid or item.uid, item.context, item.parts, form, item.ordered, item.handle,
                origin if origin is not None else item.origin)


def make_tasks(items: list[Item], reader: Reader, settings: Settings, skips: Skips) -> list[Task]:
    """Tasks in item order (a merged task takes the place of its first question)."""
    usable = []
    for item in items:
        if any(len(p.text) > settings.max_doc_chars for p in item.parts):
            skips.add("a document is longer than max_doc_chars")
        else:
            usable.append(item)

    merged: dict[str, Task] = {}  # uid of the first merged item -> the merged task
    absorbed: set[str] = set()
    if "multi-choice" in settings.qa_types and settings.merge_share > 0:
        by_context: dict[str, list[Item]] = {}
        for item in usable:
            if item.mergeable and any(can_merge(f) for f in item.forms):
                by_context.setdefault(item.context, []).append(item)
        for context, group in by_context.items():
            group = group[:MAX_STATEMENTS]
            if len(group) < MIN_STATEMENTS:
                continue
            rng = seeded(settings, reader.name, context, "merge")
            if "single-choice" in settings.qa_types and rng.random() >= settings.merge_share:
                continue
            form = merge(group, reader.material, rng)
            first = group[0]
            merged[first.uid] = _task(first, reader.name, form, uid=f"{first.uid}-m{len(group)}",
                                      origin="; ".join(it.origin for it in group))
            absorbed.update(it.uid for it in group)

    tasks = []
    for item in usable:
        if item.uid in merged:
            tasks.append(merged[item.uid])
        if item.uid in absorbed:
            continue
        forms = [f for f in item.forms if f.qa_type in settings.qa_types]
        if not forms:
            skips.add("qa type not selected")
            continue
        fitting = [f for f in (fit_answer(f, settings) for f in forms) if f is not None]
        if not fitting:
            skips.add("every accepted answer is longer than max_answer_words")
            continue
        tasks.append(_task(item, reader.name, seeded(settings, reader.name, item.uid, "form").choice(fitting)))
    return tasks
