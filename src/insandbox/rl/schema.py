"""The training row: the benchmark row schema (id, problem_statement, ground_truth, input_files,
domain, qa_type) plus what building and scoring context tasks need.

    single-choice  ground_truth "C"              options ["A", "B", "C", "D"]
    multi-choice   ground_truth "A,C"            options ["A", ..., "E"]   (letters sorted, comma-joined)
    open           ground_truth "Paris"          aliases ["City of Paris"]  answer_type "text" or "number"

`problem_statement` is the whole user task: in-context examples, the question, where the material
is (/testbed/documents, never which file) and how to write the answer (/testbed/answer.txt).
`input_files` are the documents, under neutral names.

Rows of the released data (daixuancheng/llm-in-sandbox-rl, config instruct_pretrain) are read as
they are: `input_files` may be {path: text}, that dict as a JSON string, or a list of {path,
content}; `ground_truth` a string, a number, a JSON-quoted string or a list (a choice question's
letters; an open question's accepted answers, the first the ground truth, the rest aliases); `id`
a number; `qa_type` spelt with an underscore. `read_task_rows` loads rows from anything
core/data_source.py names (a file, a save_to_disk folder, hf:NAME:CONFIG:SPLIT) through this model.
"""
from __future__ import annotations

import json
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..core.data_source import DataError, input_files_dict, load_records

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

    @model_validator(mode="before")
    @classmethod
    def _released_forms(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            return raw
        row = dict(raw)
        if isinstance(row.get("id"), int) and not isinstance(row.get("id"), bool):
            row["id"] = str(row["id"])
        if isinstance(row.get("qa_type"), str):
            row["qa_type"] = row["qa_type"].strip().lower().replace("_", "-")
        if "input_files" in row:
            try:
                row["input_files"] = input_files_dict(row["input_files"])
            except DataError as e:
                raise ValueError(str(e)) from None
        if "ground_truth" in row:
            row.update(_ground_truth(row["ground_truth"], row.get("qa_type") or "open", row.get("aliases")))
        return row

    def as_record(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def _ground_truth(value: Any, qa_type: str, aliases: Any) -> dict[str, Any]:
    """ground_truth (and aliases, for an open question given a list of answers) as the model keeps them."""
    if isinstance(value, str) and value.strip()[:1] in ('"', "["):
        try:
            decoded = json.loads(value)
        except ValueError:
            decoded = value
        if isinstance(decoded, str) or (isinstance(decoded, list) and decoded
                                        and all(isinstance(x, str) for x in decoded)):
            value = decoded  # "[1, 2]" (an interval, say) stays the text it is
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"ground_truth": str(value)}
    if isinstance(value, (list, tuple)) and value:
        answers = [str(x).strip() for x in value]
        if qa_type == "multi-choice":
            return {"ground_truth": ",".join(sorted(set(answers)))}
        extra = [a for a in answers[1:] if a]
        if extra and isinstance(aliases, list):
            extra = list(aliases) + [a for a in extra if a not in aliases]
        return {"ground_truth": answers[0], **({"aliases": extra} if extra else {})}
    return {"ground_truth": value}


def read_task_rows(source: str, limit: Optional[int] = None, command: str = "rl") -> list[dict[str, Any]]:
    """Task rows (validated, ids unique) from a file, a save_to_disk folder or `hf:NAME[:CONFIG[:SPLIT]]`
    (split `train` unless named, or the only one), the first `limit` of them; DataError, one line, on
    anything wrong: the rows' place, the row's number and id, and what is wrong with it."""
    records = load_records(source, prefer=("train",), command=command)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for n, raw in enumerate(records, 1):
        if not isinstance(raw, dict):
            raise DataError(f"{source} row {n}: not a task row (a {type(raw).__name__}, not an object)")
        try:
            row = TaskRow(**raw).as_record()
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err.get("loc", ()))
            what = f"{where}: {err.get('msg')}" if where else str(err.get("msg"))
            raise DataError(f"{source} row {n} (id {raw.get('id', '?')!r:.60}): not a task row "
                            f"({what.replace('Value error, ', '')})") from None
        except TypeError as e:
            raise DataError(f"{source} row {n}: not a task row ({e})") from None
        if row["id"] in seen:
            raise DataError(f"{source} row {n}: task id {row['id']!r} appears twice")
        seen.add(row["id"])
        rows.append(row)
        if limit and len(rows) >= limit:
            break
    if not rows:
        raise DataError(f"{source}: no task rows")
    return rows
