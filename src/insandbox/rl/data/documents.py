"""The files of a task: its own documents plus, for a single document, distractors from other
material of the same source, all under neutral names (doc_01.txt, ...; tables keep .csv).

Single documents and their distractors are shuffled, so neither a name nor a position tells
which file matters. Parts that read in order (story sections) keep that order in their names.
A distractor never is the task's own material, never holds the quote the prompt gives to find
it, and, for an open text question, never holds one of its accepted answers.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from .items import Item, Part, PartRef
from .settings import Settings
from .tasks import Task, seeded
from .text import contains_phrase

SPARE_DRAWS = 30  # candidates looked at beyond k, for the ones a task must refuse
MIN_ANSWER_CHARS = 4  # shorter answers ("4", "Yes") are everywhere and say nothing about a distractor


@dataclass
class Layout:
    files: dict[str, str]  # name -> text, in name order
    part_names: list[str]  # the name of each of the task's own parts
    distractors: int = 0
    wanted: int = 0  # distractors drawn for; more than `distractors` when the source ran short


@dataclass
class DistractorPool:
    """The distinct single documents of one source, any of which can distract another task."""

    entries: list[tuple[str, Part, str]] = field(default_factory=list)  # (context, part, its text lower-cased)

    @classmethod
    def of(cls, items: list[Item], max_chars: int) -> DistractorPool:
        pool, seen_context, seen_text = cls(), set(), set()
        for item in items:
            if len(item.parts) != 1 or item.context in seen_context:
                continue
            part = item.parts[0]
            seen_context.add(item.context)
            if len(part.text) <= max_chars and part.text not in seen_text:
                seen_text.add(part.text)
                pool.entries.append((item.context, part, part.text.lower()))
        return pool

    def draw(self, task: Task, k: int, rng: random.Random) -> list[Part]:
        if k <= 0 or not self.entries:
            return []
        own = task.parts[0]
        banned = [task.handle] if task.handle else []
        if task.form.qa_type == "open" and task.form.answer_type == "text":
            banned += [a for a in task.form.answers if len(a) >= MIN_ANSWER_CHARS]
        out: list[Part] = []
        for i in rng.sample(range(len(self.entries)), min(len(self.entries), k + SPARE_DRAWS)):
            context, part, lower = self.entries[i]
            if context == task.context or part.text == own.text or part.ext != own.ext:
                continue
            # the substring test is a cheap first look; the whole-word match decides
            if any(p.split()[0].lower() in lower and contains_phrase(part.text, p) for p in banned if p.split()):
                continue
            out.append(part)
            if len(out) == k:
                break
        return out


def lay_out(task: Task, pool: DistractorPool, settings: Settings) -> Layout:
    rng = seeded(settings, task.source, task.uid, "documents")
    wanted = rng.randint(*settings.distractors) if len(task.parts) == 1 else 0
    extra = pool.draw(task, wanted, rng)
    files: list[tuple[Part, int]] = [(p, i) for i, p in enumerate(task.parts)] + [(d, -1) for d in extra]
    if not task.ordered:
        rng.shuffle(files)
    width = max(2, len(str(len(files))))
    names = [f"doc_{n:0{width}d}{part.ext}" for n, (part, _) in enumerate(files, 1)]
    part_names = [""] * len(task.parts)
    for name, (_, own) in zip(names, files):
        if own >= 0:
            part_names[own] = name
    return Layout({name: part.text for name, (part, _) in zip(names, files)}, part_names, len(extra), wanted)


def files_in_name_order(task: Task, layout: Layout) -> Task:
    """A question whose options are the task's files lists them in name order (the order the
    model sees them in), so no option's place says anything."""
    form = task.form
    if not form.choices or not all(isinstance(c, PartRef) for c in form.choices):
        return task
    order = sorted(range(len(form.choices)), key=lambda i: layout.part_names[form.choices[i].index])
    correct = sorted(order.index(i) for i in form.correct)
    return replace(task, form=replace(form, choices=[form.choices[i] for i in order], correct=correct))
