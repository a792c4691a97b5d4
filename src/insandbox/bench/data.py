"""Benchmark rows: from the Hugging Face hub (through `datasets`) or a local JSON/JSONL file.

Rows follow the reference implementation's schema: `id`, `problem_statement`,
`ground_truth`, optional `input_files` ({filename: text}, or that dict serialised as a
string), `domain`, `qa_type`; other fields are kept.
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union


class DataError(ValueError):
    """The data could not be loaded; the message says why and what to do."""


@dataclass
class Row:
    id: str
    problem_statement: str
    ground_truth: str
    input_files: dict[str, str] = field(default_factory=dict)
    domain: str = ""
    qa_type: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def parse_input_files(value: Any, row_id: str = "") -> dict[str, str]:
    """{filename: text} from a dict, a JSON string, or a Python-literal string."""
    if value in (None, "", {}):
        return {}
    if isinstance(value, dict):
        return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in value.items()}
    if isinstance(value, str):
        for parse in (json.loads, ast.literal_eval):
            try:
                parsed = parse(value)
            except (ValueError, SyntaxError, MemoryError):
                continue
            if isinstance(parsed, dict):
                return parse_input_files(parsed, row_id)
        raise DataError(f"row {row_id}: input_files is neither a dict nor a serialised dict")
    raise DataError(f"row {row_id}: input_files must be a dict of filename -> text, got {type(value).__name__}")


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
    p = Path(path)
    if not p.is_file():
        raise DataError(f"data file not found: {p}")
    text = p.read_text(encoding="utf-8")
    if not text.lstrip().startswith("[") and (p.suffix == ".jsonl" or "\n{" in text.strip()):
        rows = []
        for n, line in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 may sit inside a string
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as e:
                    raise DataError(f"{p}:{n}: not JSON ({e})") from None
        return rows
    try:
        data = json.loads(text)
    except ValueError as e:
        raise DataError(f"{p}: not JSON or JSONL ({e})") from None
    if isinstance(data, dict):
        data = data.get("data") or data.get("rows") or data.get("test") or []
    if not isinstance(data, list):
        raise DataError(f"{p}: expected a list of rows")
    return data


def load_hub(dataset: str, config: Optional[str], split: str) -> list[dict]:
    try:
        import datasets
    except ImportError:
        raise DataError("loading from the hub needs `datasets`: pip install 'insandbox[bench]'") from None
    try:
        ds = datasets.load_dataset(dataset, config, split=split)
    except Exception as e:
        raise DataError(f"cannot load {dataset} ({config}, {split}) from the Hugging Face hub: "
                        f"{str(e).splitlines()[0][:300]}. Offline? Pass a local file with --data PATH") from None
    return [dict(r) for r in ds]


def load_rows(data: Optional[Union[str, Path]], dataset: Optional[str], config: Optional[str], split: str = "test",
              ids: Optional[list[str]] = None, limit: Optional[int] = None) -> list[Row]:
    if data:
        raw = load_local(data)
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
