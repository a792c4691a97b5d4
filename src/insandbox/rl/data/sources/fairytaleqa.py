"""FairytaleQA: open questions on fairy tales that come split into sections.

Layout: data-by-train-split/section-stories/<split>/<story>-story.csv (section, text) and
data-by-train-split/questions/<split>/<story>-questions.csv (question_id, ..., question,
answer1-answer6); question_id repeats in a few files, so a question is known by its row. Every
section becomes one file, in story order. All non-empty references are accepted answers
(answer1 first; val and test have a second annotator's answer4).
"""
from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from ..items import Form, Item, Part, ReadOptions, Skips
from ..text import clean_document, dedupe, one_line, slug, tidy_question
from .reader import Reader, SourceError

ANSWER_COLUMNS = [f"answer{i}" for i in range(1, 7)]


def _root(folder: Path) -> Path:
    """The folder holding questions/ and section-stories/ (the source root or data-by-train-split)."""
    nested = folder / "data-by-train-split"
    return nested if nested.is_dir() else folder


def _recognise(folder: Path) -> bool:
    root = _root(folder)
    return (root / "questions").is_dir() and (root / "section-stories").is_dir() and \
        any((root / "questions").glob("*/*-questions.csv"))


def _section_key(section: str) -> tuple[int, str]:
    return (int(section), "") if section.strip().isdigit() else (1 << 30, section)


def _sections(path: Path) -> list[Part]:
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    if rows and not {"section", "text"} <= set(rows[0]):
        raise SourceError(f"{path}: expected the columns section and text")
    rows.sort(key=lambda r: _section_key(r["section"]))
    return [Part(clean_document(r["text"])) for r in rows if r["text"].strip()]


def read(folder: Path, options: ReadOptions, skips: Skips) -> Iterator[Item]:
    root = _root(folder)
    for qpath in sorted((root / "questions").glob("*/*-questions.csv")):
        split, story = qpath.parent.name, qpath.name.removesuffix("-questions.csv")
        spath = root / "section-stories" / split / f"{story}-story.csv"
        with qpath.open(encoding="utf-8", newline="") as f:
            questions = list(csv.DictReader(f))
        if not spath.is_file():
            skips.add("story file missing", len(questions))
            continue
        parts, where = _sections(spath), qpath.relative_to(folder).as_posix()
        if not parts:
            skips.add("story file empty", len(questions))
            continue
        for n, q in enumerate(questions, 1):
            answers = dedupe([one_line(q.get(c) or "") for c in ANSWER_COLUMNS])
            question = tidy_question(q.get("question") or "")
            if not answers or not question:
                skips.add("no question or no answer")
                continue
            # question_id repeats in a few files: the row number is what identifies a question
            yield Item(uid=f"{split}-{slug(story)}-{n}", context=f"{split}/{story}", parts=parts,
                       forms=[Form("open", question, answers=answers)], ordered=True,
                       origin=f"{where}#row{n}")


READER = Reader(name="fairytaleqa", domain="fiction", material="story",
                layout="data-by-train-split/{questions,section-stories}/<split>/*.csv",
                recognise=_recognise, read=read)
