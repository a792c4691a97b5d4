"""The training row: the benchmark row schema (id, problem_statement, ground_truth, input_files,
domain, qa_type) plus what building and scoring context tasks need.

    single-choice  ground_truth "C"              options ["A", "B", "C", "D"]
    multi-choice   ground_truth "A,C"            options ["A", ..., "E"]   (letters sorted, comma-joined)
    open           ground_truth "Paris"          aliases ["City of Paris"]  answer_type "text" or "number"

`problem_statement` is the whole user task: in-context examples, the question, where the material
is (/testbed/documents, never which file) and how to write the answer (/testbed/answer.txt).
`input_files` are the documents, under neutral names.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

QAType = Literal["single-choice", "multi-choice", "open"]
QA_TYPES: tuple[str, ...] = ("single-choice", "multi-choice", "open")
DOMAINS: tuple[str, ...] = ("encyclopedia", "fiction", "academic", "social_media")
DOCUMENTS_DIR = "/testbed/documents"


class TaskRow(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    problem_statement: str
    ground_truth: str
    input_files: dict[str, str] = Field(default_factory=dict)
    domain: str = ""
    qa_type: QAType = "open"
    source: str = ""
    options: list[str] = Field(default_factory=list)  # option letters of a choice question
    aliases: list[str] = Field(default_factory=list)  # other accepted answers of an open question
    answer_type: Literal["text", "number"] = "text"  # open answers: "number" is checked with math-verify

    def as_record(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
