"""RACE: English reading exams (Chinese middle and high school), single-choice questions A-D.

Layout: <split>/{middle,high}/<n>.txt (or {middle,high}/<n>.txt), each file one JSON object:
id, article, questions[], options[][4], answers[]. Many questions are cloze ("... because _ .").
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from ..items import Form, Item, Part, ReadOptions, Skips
from ..text import clean_document, one_line, slug, tidy_question
from .reader import Reader, SourceError

LEVELS = ("middle", "high")
LETTERS = "ABCD"


def _natural(path: Path) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.as_posix()))


def _article_files(folder: Path) -> list[Path]:
    found = [p for level in LEVELS for pattern in (f"{level}/*.txt", f"*/{level}/*.txt") for p in folder.glob(pattern)]
    return sorted(found, key=_natural)


def tidy_blank(question: str) -> str:
    """One line, every blank written as ___ (the source pads underscores with spaces), no
    stray full stops."""
    text = re.sub(r"\s*_+\s*", " ___ ", one_line(question)).strip()
    return tidy_question(re.sub(r" ___ ([.,;:?!])", r" ___\1", text))


def read(folder: Path, options: ReadOptions, skips: Skips) -> Iterator[Item]:
    for path in _article_files(folder):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            article, questions, choices, answers = doc["article"], doc["questions"], doc["options"], doc["answers"]
        except (ValueError, KeyError, TypeError) as e:
            raise SourceError(f"{path}: not a RACE article file ({e})") from None
        rel = path.relative_to(folder)
        context = rel.with_suffix("").as_posix()
        part = Part(clean_document(article))
        for q, (question, opts, letter) in enumerate(zip(questions, choices, answers), 1):
            if letter not in LETTERS[:len(opts)] or len(opts) < 2:
                skips.add("answer is not one of the options")
                continue
            yield Item(uid=f"{slug(context)}-q{q}", context=context, parts=[part],
                       forms=[Form("single-choice", tidy_blank(question), choices=[tidy_question(o) for o in opts],
                                   correct=[LETTERS.index(letter)])],
                       origin=f"{rel.as_posix()}#q{q}", mergeable=True)


READER = Reader(name="race", domain="academic", material="article", layout="[<split>/]{middle,high}/<n>.txt (JSON)",
                recognise=lambda folder: bool(_article_files(folder)), read=read)
