"""Build training rows from source folders: read, make tasks, order and sample, lay out the
documents, pick in-context examples, write the prompts.

Sources are built in name order whatever the order of the folders, and each source's tasks in
a seeded shuffle, so the same folders, seed and settings give the same rows.

Held-out tasks (Settings.heldout per source) are the first of that shuffle, taken material by
material: a training task never has the material of a held-out one (its other questions are left
out), and training tasks take their in-context examples from training tasks only, so no held-out
answer is ever shown in training.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..schema import TaskRow
from .documents import DistractorPool, Layout, files_in_name_order, lay_out
from .examples import pick_examples
from .items import Item, ReadOptions, Skips
from .prompt import ground_truth, letters, problem_statement
from .settings import Settings
from .sources import Reader, SourceError, recognise, source_folders
from .tasks import Task, make_tasks, seeded


@dataclass
class SourceReport:
    name: str
    folder: str
    domain: str
    items: int = 0  # questions (TweetEval: tweet groups) the reader produced
    tasks: int = 0  # rows written
    heldout: int = 0  # held-out rows written
    skipped: dict[str, int] = field(default_factory=dict)  # records or items left out, by reason
    fewer_distractors: int = 0  # tasks that got fewer distractors than drawn (the source ran short)


@dataclass
class Build:
    settings: Settings
    rows: list[dict[str, Any]]
    sources: list[SourceReport]
    heldout: list[dict[str, Any]] = field(default_factory=list)


def resolve_sources(folders: list[Path]) -> list[tuple[Reader, Path]]:
    """(reader, folder) per folder, in source name order (a folder of source folders counts as the
    sources in it: sources.source_folders); SourceError for a folder no reader fits, or two folders
    of one source."""
    found: dict[str, tuple[Reader, Path]] = {}
    for folder in source_folders(folders)[0]:
        reader = recognise(folder)
        if reader.name in found:
            raise SourceError(f"two source folders are {reader.name}: {found[reader.name][1]} and {folder}")
        found[reader.name] = (reader, folder)
    return [found[name] for name in sorted(found)]


def _row(task: Task, reader: Reader, layout: Layout, examples: list[Task]) -> dict[str, Any]:
    form = task.form
    row = TaskRow(id=task.id, problem_statement=problem_statement(task, layout, reader.material, examples),
                  ground_truth=ground_truth(form), input_files=layout.files, domain=reader.domain,
                  qa_type=form.qa_type, source=reader.name,
                  options=letters(form) if form.qa_type != "open" else [],
                  aliases=form.answers[1:] if form.qa_type == "open" else [], answer_type=form.answer_type,
                  source_ref=task.origin, example_ids=[ex.id for ex in examples])
    return row.as_record()


def split_heldout(tasks: list[Task], count: int) -> tuple[list[Task], list[Task], int]:
    """(training, held out, training tasks dropped for sharing a held-out material)."""
    if count <= 0:
        return tasks, [], 0
    heldout, contexts = [], set()
    for task in tasks:
        if len(heldout) == count:
            break
        heldout.append(task)
        contexts.add(task.context)
    training = [t for t in tasks[len(heldout):] if t.context not in contexts]
    return training, heldout, len(tasks) - len(heldout) - len(training)


def build_source(reader: Reader, folder: Path,
                 settings: Settings) -> tuple[list[dict[str, Any]], list[dict[str, Any]], SourceReport]:
    """(training rows, held-out rows, report) of one source."""
    report = SourceReport(reader.name, str(folder.resolve()), reader.domain)
    skips = Skips()
    items: list[Item] = list(reader.read(folder, ReadOptions(seeded(settings, reader.name, "read"),
                                                             settings.qa_types), skips))
    report.items = len(items)
    tasks = make_tasks(items, reader, settings, skips)
    ids = Counter(t.id for t in tasks)
    if len(ids) != len(tasks):  # the rows' ids must be unique; a reader names its items
        raise SourceError(f"source folder {folder}: two {reader.name} tasks have the id {ids.most_common(1)[0][0]}")
    seeded(settings, reader.name, "order").shuffle(tasks)
    tasks, heldout, shared = split_heldout(tasks, settings.heldout)
    if shared:
        skips.counts["material of a held-out task"] = shared
    if settings.limit is not None:
        tasks = tasks[:settings.limit]
    pool = DistractorPool.of(items, settings.max_doc_chars)
    layouts = [lay_out(t, pool, settings) for t in heldout + tasks]
    laid = [files_in_name_order(t, layout) for t, layout in zip(heldout + tasks, layouts)]
    heldout, tasks = laid[:len(heldout)], laid[len(heldout):]
    # training examples from training tasks only; held-out ones from anything (their prompts are never trained on)
    examples = pick_examples(heldout + tasks, settings.examples)[:len(heldout)] if heldout else []
    examples += [[len(heldout) + j for j in ex] for ex in pick_examples(tasks, settings.examples)]
    rows = [_row(t, reader, layout, [laid[j] for j in ex]) for t, layout, ex in zip(laid, layouts, examples)]
    report.heldout = len(heldout)
    report.tasks = len(rows) - len(heldout)
    report.skipped = dict(sorted(skips.counts.items()))
    report.fewer_distractors = sum(1 for layout in layouts if layout.distractors < layout.wanted)
    return rows[len(heldout):], rows[:len(heldout)], report


def build(folders: list[Path], settings: Settings) -> Build:
    rows: list[dict[str, Any]] = []
    heldout: list[dict[str, Any]] = []
    reports = []
    for reader, folder in resolve_sources(folders):
        source_rows, source_heldout, report = build_source(reader, folder, settings)
        rows += source_rows
        heldout += source_heldout
        reports.append(report)
    return Build(settings, rows, reports, heldout)
