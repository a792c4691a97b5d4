"""What a source reader yields: raw items (material, question, answer) before any task is built.

A reader knows its file format and nothing about distractors, file names, prompts or seeds
beyond the random generator it is handed. The builder turns items into training rows.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal, Optional, Union

Kind = Literal["single-choice", "multi-choice", "open"]


@dataclass(frozen=True)
class Part:
    """One document of an item's material; it becomes one file in the sandbox."""

    text: str
    ext: str = ".txt"  # tables keep ".csv"


@dataclass(frozen=True)
class PartRef:
    """A choice that names one of the item's own files ("which file holds ..."); the builder
    renders it as the file's neutral name, or quotes the part in an in-context example."""

    index: int


Choice = Union[str, PartRef]


@dataclass
class Form:
    """One way to ask the item: its question, its options and its answer."""

    qa_type: Kind
    question: str
    choices: list[Choice] = field(default_factory=list)  # choice questions: option texts, in order
    correct: list[int] = field(default_factory=list)  # choice questions: indices of the correct options
    answers: list[str] = field(default_factory=list)  # open questions: the gold answer first, then aliases
    answer_type: Literal["text", "number"] = "text"


@dataclass
class Item:
    """A question on some material. `forms` lists every qa_type the item can be asked as; the
    builder picks one. `context` groups items on the same material (they are never distractors
    or in-context examples of each other)."""

    uid: str  # unique within the source, only [A-Za-z0-9._-]; the task id is "<source>-<uid>"
    context: str
    parts: list[Part]
    forms: list[Form]
    ordered: bool = False  # several parts that read in order (story sections): names keep that order
    handle: Optional[str] = None  # a quote the prompt gives to find the material among distractors
    origin: str = ""  # where the item came from in the source folder (file and position)
    mergeable: bool = False  # a single-choice question that may join others on its context (select all true)


@dataclass
class ReadOptions:
    """What the builder tells a reader."""

    rng: random.Random  # for readers that assemble items (TweetEval's groups); seeded per source
    qa_types: tuple[str, ...] = ("single-choice", "multi-choice", "open")


@dataclass
class Skips:
    """Why source records did not become items, counted (for the manifest)."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, reason: str, n: int = 1) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + n
