"""Benchmark rows: the task's hub dataset (through `datasets`), or what `--data` names: a local
JSON/JSONL/parquet file, a folder saved with `save_to_disk`, or another hub dataset
(`hf:NAME[:CONFIG[:SPLIT]]`); see core/data_source.py. Without a split, `--data` takes the task's
split (`test` for the built-in tasks) where the data has it, else the only split there is.

Rows follow the reference implementation's schema: `id`, `problem_statement`,
`ground_truth`, optional `input_files` ({filename: text}, that dict serialised as a string, or
a list of {path, content}), `domain`, `qa_type`; other fields are kept.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from ..core.data_source import DataError, input_files_dict, load_records, read_file

__all__ = ["DataError", "Row", "load_hub", "load_local", "load_rows", "parse_input_files", "to_row"]


@dataclass
class Row:
    id: str
    problem_statement: str
    ground_truth: str
    input_files: dict[str, str] = field(default_factory=dict)
    domain: str = ""
    qa_type: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    input_dir: Optional[Path] = None  # a host folder whose contents go to the sandbox's input folder too


def parse_input_files(value: Any, row_id: str = "") -> dict[str, str]:
    """{filename: text} from a dict, a JSON or Python-literal string of one, or a list of {path, content}."""
    return input_files_dict(value, row_id)


def to_row(raw: dict, index: int) -> Row:
    if not isinstance(raw, dict):
        raise DataError(f"row {index}: expected a JSON object, got {type(raw).__name__}")
    missing = [k for k in ("problem_statement", "ground_truth") if k not in raw]
    if missing:
        raise DataError(f"row {raw.get('id', index)}: missing {', '.join(missing)}")
    known = {"id", "problem_statement", "ground_truth", "input_files", "domain", "qa_type"}
    row_id = str(raw.get("id", index))
    gt = raw["ground_truth"]
    return Row(id=row_id, problem_statement=str(raw["problem_statement"]),
               ground_truth=gt if isinstance(gt, str) else json.dumps(gt),
               input_files=parse_input_files(raw.get("input_files"), row_id), domain=str(raw.get("domain") or ""),
               qa_type=str(raw.get("qa_type") or ""), extra={k: v for k, v in raw.items() if k not in known})


def load_local(path: Union[str, Path]) -> list[dict]:
    return read_file(Path(path))


def load_hub(dataset: str, config: Optional[str], split: str) -> list[dict]:
    return load_records(f"hf:{dataset}:{config or ''}:{split}", command="bench")


def load_rows(data: Optional[Union[str, Path]], dataset: Optional[str], config: Optional[str], split: str = "test",
              ids: Optional[list[str]] = None, limit: Optional[int] = None) -> list[Row]:
    if data:
        raw = load_records(str(data), prefer=(split, "test"), command="bench")
    elif dataset:
        raw = load_hub(dataset, config, split)
    else:
        raise DataError("no data: this task names no hub dataset; pass --data PATH")
    rows = [to_row(r, i) for i, r in enumerate(raw)]
    seen: set[str] = set()
    for r in rows:
        if r.id in seen:
            raise DataError(f"duplicate row id {r.id!r}: ids must be unique")
        seen.add(r.id)
    if ids:
        wanted = set(ids)
        unknown = wanted - seen
        if unknown:
            raise DataError(f"unknown ids: {', '.join(sorted(unknown)[:10])}")
        rows = [r for r in rows if r.id in wanted]
    if limit is not None:
        rows = rows[:limit]
    return rows
