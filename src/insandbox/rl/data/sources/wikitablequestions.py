"""WikiTableQuestions: a question on one Wikipedia table (a CSV file).

Layout: data/*.tsv (id, utterance, context, targetValue; the random-split-* files repeat
training rows and are not read) and the tables at the paths the `context` column names
(csv/2xx-csv/n.csv). TSV fields escape newline, backslash and pipe as \\n, \\\\, \\p; a
targetValue with several items separates them with a bare `|`. Tables escape quotes as \\"
and backslashes as \\\\; they are rewritten as standard CSV.

A single answer is an open question (`answer_type: number` when it is a plain number). A list
answer becomes a multi-choice question: the items plus distractor values from the table column
that holds them.
"""
from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

from ..items import Form, Item, Part, ReadOptions, Skips
from ..text import dedupe, one_line, parse_number, sentence_case, slug
from .reader import Reader, SourceError

HEADER = ["id", "utterance", "context", "targetValue"]
MAX_OPTIONS = 8  # list answers: gold items plus distractors up to this many options (more only for long lists)
MIN_DISTRACTORS = 2
MAX_LIST = 10  # longer list answers are left out (lettered options would run long)


def _question_files(folder: Path) -> list[Path]:
    out = []
    for path in sorted((folder / "data").glob("*.tsv")):
        if path.name.startswith("random-split-"):
            continue
        with path.open(encoding="utf-8") as f:
            if f.readline().rstrip("\r\n").split("\t") == HEADER:
                out.append(path)
    return out


def unescape(field: str) -> str:
    """A TSV field without WTQ's escapes (\\n newline, \\p pipe, \\\\ backslash)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 1 < len(field) and field[i + 1] in "np\\":
            out.append({"n": "\n", "p": "|", "\\": "\\"}[field[i + 1]])
            i += 2
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def split_answer(field: str) -> list[str]:
    """The items of a targetValue: split on bare pipes (an escaped \\p is part of an item)."""
    items, current, i = [], [], 0
    while i < len(field):
        if field[i] == "\\" and i + 1 < len(field):
            current.append(field[i:i + 2])
            i += 2
        elif field[i] == "|":
            items.append("".join(current))
            current = []
            i += 1
        else:
            current.append(field[i])
            i += 1
    items.append("".join(current))
    return [one_line(unescape(x)) for x in items if x.strip()]


def read_table(path: Path) -> list[list[str]]:
    """Rows of a WTQ table file (its escapes undone)."""
    with path.open(encoding="utf-8", newline="") as f:
        return [row for row in csv.reader(f, escapechar="\\", doublequote=False)]


def table_csv(rows: list[list[str]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def _list_choice(golds: list[str], rows: list[list[str]], options: ReadOptions) -> Optional[Form]:
    """Multi-choice for a list answer: distractors are other values of the column holding the
    most gold items; None when that column has too few other values, or the list is too long."""
    if len(golds) > MAX_LIST:
        return None
    keys = {g.casefold() for g in golds}
    body = rows[1:]
    width = max((len(r) for r in body), default=0)
    best, best_hits = None, 0
    for col in range(width):
        hits = len(keys & {r[col].strip().casefold() for r in body if col < len(r)})
        if hits > best_hits:
            best, best_hits = col, hits
    if best is None:
        return None
    pool, seen = [], set()
    for r in body:
        value = one_line(r[best]) if best < len(r) else ""
        if value and value.casefold() not in keys and value.casefold() not in seen:
            seen.add(value.casefold())
            pool.append(value)
    if len(pool) < MIN_DISTRACTORS:
        return None
    n = options.rng.randint(MIN_DISTRACTORS, max(MIN_DISTRACTORS, min(len(pool), MAX_OPTIONS - len(golds))))
    choices = [(g, True) for g in golds] + [(d, False) for d in options.rng.sample(pool, n)]
    options.rng.shuffle(choices)
    return Form("multi-choice", "", choices=[c for c, _ in choices],
                correct=[i for i, (_, ok) in enumerate(choices) if ok])


def read(folder: Path, options: ReadOptions, skips: Skips) -> Iterator[Item]:
    seen: set[str] = set()
    tables: dict[str, Optional[tuple[list[list[str]], Part]]] = {}  # read once, shared by its questions
    for path in _question_files(folder):
        where = path.relative_to(folder).as_posix()
        with path.open(encoding="utf-8", newline="") as f:
            lines = f.read().split("\n")
        for n, line in enumerate(lines[1:], 2):
            if not line.strip():
                continue
            fields = line.rstrip("\r").split("\t")
            if len(fields) != 4:
                raise SourceError(f"{path}:{n}: expected 4 tab-separated fields, got {len(fields)}")
            qid, utterance, context, target = fields
            if qid in seen:
                continue
            seen.add(qid)
            if context not in tables:
                table_path = folder / unescape(context)
                rows = read_table(table_path) if table_path.is_file() else []
                tables[context] = (rows, Part(table_csv(rows), ".csv")) if rows else None
            if tables[context] is None:
                skips.add("table file missing or empty")
                continue
            rows, part = tables[context]
            golds = dedupe(split_answer(target))
            question = sentence_case(unescape(utterance))
            if not golds:
                skips.add("no answer")
                continue
            if len(golds) == 1:
                number = parse_number(golds[0])
                form = (Form("open", question, answers=[number] + ([golds[0]] if golds[0] != number else []),
                             answer_type="number") if number is not None else Form("open", question, answers=golds))
            else:
                form = _list_choice(golds, rows, options)
                if form is None:
                    skips.add("list answer too long or without enough other values to choose from")
                    continue
                form.question = question
            yield Item(uid=slug(qid), context=context, parts=[part], forms=[form],
                       origin=f"{where}:{n}")


READER = Reader(name="wikitablequestions", domain="encyclopedia", material="table",
                layout="data/*.tsv (id, utterance, context, targetValue) and the csv/ tables",
                recognise=lambda folder: bool(_question_files(folder)), read=read)
