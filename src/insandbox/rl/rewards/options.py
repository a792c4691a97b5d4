"""The option letters of a choice row, and its ground truth as letters.

The row's `options` field wins: letters ("A".."Z") as given, or option texts (A, B, ... by count).
A row without them falls back to the letters the question itself lists, read as the benchmark's
strict choice scorer reads them; a question listing none allows any letter A-Z.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from string import ascii_uppercase

from insandbox.bench.data import Row
from insandbox.bench.scorers.choice import option_letters

_SINGLE_LETTER = re.compile(r"[A-Za-z]")


@dataclass
class Options:
    letters: str  # sorted, e.g. "ABCD"
    source: str  # "row", "question", or why any letter is allowed


def row_options(options: object, problem_statement: str) -> Options:
    if options:
        if not isinstance(options, (list, tuple)) or not all(isinstance(o, str) for o in options):
            raise ValueError(f"options must be a list of strings, got {options!r:.80}")
        if all(_SINGLE_LETTER.fullmatch(o.strip()) for o in options):
            return Options("".join(sorted({o.strip().upper() for o in options})), "row")
        if len(options) > len(ascii_uppercase):
            raise ValueError(f"{len(options)} options: more than there are letters")
        return Options(ascii_uppercase[:len(options)], "row (option texts, lettered in order)")
    letters, source = option_letters(Row(id="", problem_statement=problem_statement or "", ground_truth=""))
    if letters:
        return Options(letters, "question")
    return Options(ascii_uppercase, f"any letter ({source})")


def gold_letters(ground_truth: object) -> list[str]:
    """"A,C" (or ["A", "C"], or "C") -> sorted distinct letters; anything else is a broken row."""
    if isinstance(ground_truth, (list, tuple)):
        parts = [str(x) for x in ground_truth]
    elif isinstance(ground_truth, str):
        parts = re.split(r"[\s,;]+", ground_truth.strip())
    else:
        raise ValueError(f"a choice ground truth must be letters, got {ground_truth!r:.80}")
    parts = [p.strip() for p in parts if p.strip()]
    if not parts or not all(_SINGLE_LETTER.fullmatch(p) for p in parts):
        raise ValueError(f"a choice ground truth must be letters like 'A,C', got {ground_truth!r:.80}")
    return sorted({p.upper() for p in parts})


def check_gold_among_options(gold: list[str], options: Options) -> Options:
    """A row whose own options miss its answer is broken (raise); options read from the question may
    have been misread, so then any letter is allowed, as the benchmark scorer does."""
    missing = [g for g in gold if g not in options.letters]
    if not missing:
        return options
    if options.source.startswith("row"):
        raise ValueError(f"ground truth {','.join(missing)} is not among the row's options {options.letters}")
    return Options(ascii_uppercase, f"any letter (ground truth {','.join(missing)} is not among the letters "
                                    f"read from the question: {options.letters})")
