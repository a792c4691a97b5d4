"""LogiQA: logical-reasoning questions from the Chinese civil-service exam (English text), A-D.

Layout: Train.txt, Eval.txt, Test.txt; each example is 8 lines: a blank line, the gold letter
(a-d), the passage, the question, and four options "A." ... "D." (some marks garbled). The translation often glues
sentences ("white Americans.The same"); a space goes back after such a full stop.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from ..items import Form, Item, Part, ReadOptions, Skips
from ..text import clean_document, one_line, tidy_question
from .reader import Reader, SourceError

FILES = ("Train.txt", "Eval.txt", "Test.txt")
LETTERS = "ABCD"


def _looks_like_logiqa(path: Path) -> bool:
    """The first non-blank line is a gold letter (Train.txt alone is too common a name)."""
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.strip():
                return line.strip() in ("a", "b", "c", "d")
    return False


def _files(folder: Path) -> list[Path]:
    return [folder / name for name in FILES if (folder / name).is_file() and _looks_like_logiqa(folder / name)]


def unglue(text: str) -> str:
    """"Americans.The" -> "Americans. The" (a lower-case letter, a full stop, an upper-case letter)."""
    return re.sub(r"(?<=[a-z])\.(?=[A-Z])", ". ", text)


def strip_mark(option: str, letter: str) -> str:
    """An option without its mark. The translation garbles some marks: "d.The ...", "A No ...",
    "B? ...", and some land inside the text ("on the C.S City market" for "C. on the S City
    market"), where the mark alone is taken out."""
    m = re.match(rf"\s*[{letter}{letter.lower()}]\s*[.．、?？:)]\s*", option) or re.match(rf"\s*{letter}\s+", option)
    if m:
        return option[m.end():]
    return option.replace(f"{letter}.", "", 1)


def examples(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number of the gold letter, its 7 lines) per example; blank lines separate examples."""
    lines = path.read_text(encoding="utf-8").replace("\r\n", "\n").split("\n")
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        block = lines[i:i + 7]
        if len(block) < 7 or block[0].strip().lower() not in ("a", "b", "c", "d"):
            raise SourceError(f"{path}:{i + 1}: expected a gold letter a-d starting an 8-line LogiQA example")
        yield i + 1, block
        i += 7


def read(folder: Path, options: ReadOptions, skips: Skips) -> Iterator[Item]:
    for path in _files(folder):
        for k, (n, block) in enumerate(examples(path), 1):
            letter, passage, question, *opts = block
            passage = unglue(one_line(passage))
            yield Item(uid=f"{path.stem.lower()}-{k}", context=passage, parts=[Part(clean_document(passage))],
                       forms=[Form("single-choice", unglue(tidy_question(question)),
                                   choices=[unglue(tidy_question(strip_mark(o, x))) for o, x in zip(opts, LETTERS)],
                                   correct=[LETTERS.index(letter.strip().upper())])],
                       origin=f"{path.name}:{n}")


READER = Reader(name="logiqa", domain="academic", material="passage", layout="Train.txt, Eval.txt or Test.txt",
                recognise=lambda folder: bool(_files(folder)), read=read)
