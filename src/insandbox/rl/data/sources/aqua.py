"""AQuA-RAT: algebra word problems with five options (A-E).

Layout: train.json, dev.json, test.json, JSON lines: question, options ["A)125", ...],
rationale, correct. There is no passage: the problem is the material, in one file among
distractor problems, and the prompt quotes the problem's question sentence so it can be found.
A problem is also an open question (`answer_type: number`) when every option is a plain number
in the same unit, so the value alone names the answer.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

from ..items import Form, Item, Part, ReadOptions, Skips
from ..text import clean_document, number_with_unit, one_line
from .reader import Reader, SourceError

FILES = ("train.json", "dev.json", "test.json")
LETTERS = "ABCDE"
_MARK = re.compile(r"^\s*([A-E])\s*\)\s*")
HANDLE_MIN_WORDS = 4


def _looks_like_aqua(path: Path) -> bool:
    with path.open(encoding="utf-8", errors="replace") as f:
        first = f.readline()
    try:
        row = json.loads(first)
    except ValueError:
        return False
    return isinstance(row, dict) and {"question", "options", "correct"} <= set(row)


def _files(folder: Path) -> list[Path]:
    return [folder / name for name in FILES if (folder / name).is_file() and _looks_like_aqua(folder / name)]


def handle(problem: str) -> str:
    """The quote that finds the problem: its last question sentence, else its last sentence,
    or its opening words when that is the whole problem or too short to tell problems apart."""
    text = one_line(problem)
    sentences = re.split(r"(?<=[.?!])\s+(?=[A-Z0-9(\[])", text)
    if len(sentences) > 1:
        wordy = [s for s in sentences[1:] if len(re.findall(r"[A-Za-z]{2,}", s)) >= HANDLE_MIN_WORDS]
        questions = [s for s in wordy if s.endswith("?")]
        if questions or wordy:
            return (questions or wordy)[-1]
    return " ".join(text.split()[:12])


def numeric_form(choices: list[str], correct: int) -> Optional[Form]:
    parsed = [number_with_unit(c) for c in choices]
    if any(p is None for p in parsed) or len({p[1] for p in parsed}) != 1 or len({p[0] for p in parsed}) != 5:
        return None
    value, unit = parsed[correct]
    unit_note = {"": "", "%": " (as a percentage, without the % sign)"}.get(unit, f" (in {unit})")
    return Form("open", f"What is the answer to that problem? Give the number{unit_note}.",
                answers=[value] + ([choices[correct]] if choices[correct] != value else []), answer_type="number")


def read(folder: Path, options: ReadOptions, skips: Skips) -> Iterator[Item]:
    for path in _files(folder):
        with path.open(encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    problem, raw_options, letter = row["question"], row["options"], row["correct"].strip().upper()
                except (ValueError, KeyError, AttributeError) as e:
                    raise SourceError(f"{path}:{n}: not an AQuA row ({e})") from None
                marks = [_MARK.match(o) for o in raw_options]
                if [m.group(1) if m else None for m in marks] != list(LETTERS) or letter not in LETTERS:
                    skips.add("options are not A) to E)")
                    continue
                choices = [one_line(o[m.end():]) for o, m in zip(raw_options, marks)]
                correct = LETTERS.index(letter)
                forms = [Form("single-choice", "Which option is the answer to that problem?", choices=choices,
                              correct=[correct])]
                numeric = numeric_form(choices, correct)
                if numeric:
                    forms.append(numeric)
                yield Item(uid=f"{path.stem}-{n}", context=one_line(problem), parts=[Part(clean_document(problem))],
                           forms=forms, handle=handle(problem), origin=f"{path.name}:{n}")


READER = Reader(name="aqua", domain="academic", material="math word problem", layout="train.json, dev.json or "
                "test.json (JSON lines with question, options, correct)", recognise=lambda folder: bool(_files(folder)),
                read=read)
