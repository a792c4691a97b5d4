"""MCTest: short fictional stories, each with four single-choice questions (options A-D).

Layout: mc160/mc500 .tsv files (in MCTest/ or the folder itself), one story a line: id,
properties, story, then four times (question, A, B, C, D). The gold letters are in the .ans
file beside it, or in MCTestAnswers/ for the test sets. Lines end in CRLF; the story escapes
line breaks as \\newline (a single one is a hard wrap, two are a paragraph break). The
"one:"/"multiple:" question prefix says how many sentences the answer needs and is dropped.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

from ..items import Form, Item, Part, ReadOptions, Skips
from ..text import clean_document, slug, tidy_question
from .reader import Reader, SourceError

_NAME = re.compile(r"mc\d+\.(?:train|dev|test)\.tsv")
LETTERS = "ABCD"


def _story_files(folder: Path) -> list[Path]:
    found = [p for d in (folder, folder / "MCTest") for p in d.glob("mc*.tsv") if _NAME.fullmatch(p.name)]
    return sorted(found)


def _answer_file(story_file: Path, folder: Path) -> Optional[Path]:
    name = story_file.with_suffix(".ans").name
    for cand in (story_file.with_suffix(".ans"), folder / "MCTestAnswers" / name, folder / name):
        if cand.is_file():
            return cand
    return None


def story_text(raw: str) -> str:
    """The story with its escapes undone: paragraphs kept, hard wraps joined."""
    text = re.sub(r"(?:\\newline){2,}", "\n\n", raw)
    text = text.replace("\\newline", " ").replace("\\tab", " ")
    return clean_document("\n\n".join(" ".join(p.split()) for p in text.split("\n\n")))


def question_text(raw: str) -> str:
    return tidy_question(re.sub(r"^\s*(?:one|multiple)\s*:\s*", "", raw))


def read(folder: Path, options: ReadOptions, skips: Skips) -> Iterator[Item]:
    for path in _story_files(folder):
        ans_path = _answer_file(path, folder)
        lines = [ln for ln in path.read_text(encoding="utf-8").replace("\r\n", "\n").split("\n") if ln.strip()]
        if ans_path is None:
            skips.add("no answer file", 4 * len(lines))
            continue
        keys = [ln.split("\t") for ln in ans_path.read_text(encoding="utf-8").replace("\r\n", "\n").split("\n")
                if ln.strip()]
        if len(keys) != len(lines):
            raise SourceError(f"{ans_path}: {len(keys)} answer lines for {len(lines)} stories in {path.name}")
        where = path.relative_to(folder).as_posix()
        for n, (line, key) in enumerate(zip(lines, keys), 1):
            fields = line.split("\t")
            if len(fields) != 23 or len(key) != 4:
                raise SourceError(f"{path}:{n}: expected 23 fields and 4 answers, got {len(fields)} and {len(key)}")
            story_id, story = fields[0], story_text(fields[2])
            for q in range(4):
                question, *choices = fields[3 + 5 * q: 8 + 5 * q]
                letter = key[q].strip().upper()
                if letter not in LETTERS:
                    raise SourceError(f"{ans_path}:{n}: {letter!r} is not an option letter")
                form = Form("single-choice", question_text(question), choices=[tidy_question(c) for c in choices],
                            correct=[LETTERS.index(letter)])
                yield Item(uid=f"{slug(story_id)}-q{q + 1}", context=story_id, parts=[Part(story)], forms=[form],
                           origin=f"{where}:{n}#q{q + 1}", mergeable=True)


READER = Reader(name="mctest", domain="fiction", material="story", layout="mc160/mc500 *.tsv with their .ans files",
                recognise=lambda folder: bool(_story_files(folder)), read=read)
