"""Rows from wherever they are kept, named by one string (what `--data` takes):

    hf:NAME[:CONFIG[:SPLIT]]     a Hugging Face hub dataset, through datasets.load_dataset
    FOLDER[:SPLIT]               a folder written by Dataset.save_to_disk or DatasetDict.save_to_disk
    FILE                         JSONL, JSON (a list of rows, or {"data"|"rows"|"test": [...]}) or parquet

A split left out is chosen from `prefer` (the first of them the data has), else the only split
there is; with several and none preferred, the error lists them. Every failure is a DataError
with a one-line message: the folder that is missing, the split that is unknown and the ones there
are, the extra to install when `datasets` is not there, the first line of what the hub said.

Also here, the forms a row's fields take in the released data sets, so that every reader of rows
normalises them alike: `input_files` as {path: text}, that dict serialised as a JSON (or Python
literal) string, or a list of {path, content}.
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from .errors import DataError  # noqa: F401 (rows that cannot be loaded; imported from here too)

HUB_PREFIX = "hf:"
DATASET_FILES = ("dataset_info.json", "state.json")  # Dataset.save_to_disk
DATASET_DICT_FILE = "dataset_dict.json"  # DatasetDict.save_to_disk


@dataclass(frozen=True)
class Source:
    kind: str  # "hub", "disk" (a save_to_disk folder) or "file"
    name: str  # the hub name, or the path
    config: Optional[str] = None  # hub only
    split: Optional[str] = None  # hub and disk; None: chosen when loading

    def describe(self) -> str:
        if self.kind == "hub":
            tail = f":{self.config or ''}:{self.split}" if self.split else f":{self.config}" if self.config else ""
            return HUB_PREFIX + self.name + tail
        return self.name + (f":{self.split}" if self.split else "")


def _is_saved(folder: Path) -> bool:
    return (folder / DATASET_DICT_FILE).is_file() or all((folder / f).is_file() for f in DATASET_FILES)


def parse_source(text: str) -> Source:
    """What `text` names (nothing is read yet, beyond looking at the path)."""
    text = str(text).strip()
    if not text:
        raise DataError("no data named")
    if text.startswith(HUB_PREFIX):
        parts = text[len(HUB_PREFIX):].split(":")
        if len(parts) > 3 or not parts[0]:
            raise DataError(f"{text}: a hub dataset is hf:NAME[:CONFIG[:SPLIT]], e.g. "
                            "hf:daixuancheng/llm-in-sandbox-rl:instruct_pretrain:train")
        name, config, split = (parts + [""] * 3)[:3]
        return Source("hub", name, config or None, split or None)
    path = Path(text).expanduser()
    if not path.exists() and ":" in path.name:  # FOLDER:SPLIT
        head, _, split = text.rpartition(":")
        folder = Path(head).expanduser()
        if folder.is_dir() and split:
            return Source("disk", str(folder), split=split)
    if path.is_dir():
        return Source("disk", str(path))
    return Source("file", str(path))


def load_records(text: str, prefer: tuple[str, ...] = ("train",), command: str = "") -> list[dict[str, Any]]:
    """The rows `text` names, as plain dicts (fields as stored; see `input_files_dict` for one of them)."""
    source = parse_source(text)
    if source.kind == "file":
        return read_file(Path(source.name))
    datasets = _datasets(command)
    if source.kind == "disk":
        return _from_disk(datasets, source, prefer)
    return _from_hub(datasets, source, prefer)


def _datasets(command: str) -> Any:
    try:
        import datasets
    except ImportError:
        from .extras import install_hint

        raise DataError(install_hint("datasets", command) or "loading a dataset needs `datasets`") from None
    return datasets


def _pick_split(where: str, splits: list[str], wanted: Optional[str], prefer: tuple[str, ...]) -> str:
    if wanted is not None:
        if wanted not in splits:
            raise DataError(f"{where}: no split {wanted!r} (it has {', '.join(splits) or 'none'})")
        return wanted
    for name in prefer:
        if name in splits:
            return name
    if len(splits) == 1:
        return splits[0]
    raise DataError(f"{where}: name a split with :SPLIT (it has {', '.join(splits)})")


def _from_disk(datasets: Any, source: Source, prefer: tuple[str, ...]) -> list[dict[str, Any]]:
    folder = Path(source.name)
    if not _is_saved(folder):
        raise DataError(f"{folder}: a folder, but not one written by datasets' save_to_disk (no {DATASET_DICT_FILE}, "
                        f"no {' and '.join(DATASET_FILES)})")
    try:
        loaded = datasets.load_from_disk(str(folder))
    except Exception as e:  # a damaged folder: its arrow files, its json
        raise DataError(f"{folder}: cannot load the saved dataset ({_first_line(e)})") from None
    if isinstance(loaded, datasets.DatasetDict):
        loaded = loaded[_pick_split(str(folder), list(loaded), source.split, prefer)]
    elif source.split is not None:
        raise DataError(f"{folder}: holds one Dataset, not a DatasetDict; leave out :{source.split}")
    return [dict(row) for row in loaded]


def _from_hub(datasets: Any, source: Source, prefer: tuple[str, ...]) -> list[dict[str, Any]]:
    where = source.describe()
    try:
        split = source.split
        if split is None:
            split = _pick_split(where, list(datasets.get_dataset_split_names(source.name, source.config)), None, prefer)
        loaded = datasets.load_dataset(source.name, source.config, split=split)
    except DataError:
        raise
    except Exception as e:  # offline, no such dataset or config, unknown split: datasets says which
        raise DataError(f"{where}: cannot load it from the Hugging Face hub ({_first_line(e)}); offline? "
                        "pass local rows (a file or a save_to_disk folder) with --data") from None
    return [dict(row) for row in loaded]


def _first_line(e: BaseException) -> str:
    lines = [line for line in str(e).splitlines() if line.strip()]
    return (lines[0] if lines else type(e).__name__)[:300]


# ---------------------------------------------------------------------- local files
def read_file(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL, JSON or parquet file."""
    if not path.is_file():
        raise DataError(f"{path}: no such file" + ("" if not path.exists() else " (a folder?)"))
    if path.suffix == ".parquet":
        return _read_parquet(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    if not text.lstrip().startswith("[") and (path.suffix == ".jsonl" or "\n{" in text.strip()):
        rows = []
        for n, line in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 may sit inside a string
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as e:
                    raise DataError(f"{path}:{n}: not JSONL ({e})") from None
        return rows
    try:
        data = json.loads(text)
    except ValueError as e:
        raise DataError(f"{path}: not JSON or JSONL ({e})") from None
    if isinstance(data, dict):
        data = data.get("data") or data.get("rows") or data.get("test") or []
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a list of rows")
    return data


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        from .extras import install_hint

        raise DataError(install_hint("pyarrow") or "reading parquet needs pyarrow") from None
    try:
        return pq.read_table(path).to_pylist()
    except Exception as e:  # pyarrow's ArrowInvalid and the like
        raise DataError(f"{path}: not a parquet file ({_first_line(e)})") from None


# ---------------------------------------------------------------------- the released forms of a row's fields
_PATH_KEYS = ("path", "name", "filename", "file")
_TEXT_KEYS = ("content", "text", "contents")


def input_files_dict(value: Any, row_id: str = "") -> dict[str, str]:
    """{path: text} from {path: text}, that dict as a JSON or Python-literal string, or a list of
    {path, content} (also name/filename and text); DataError for anything else."""
    where = f"row {row_id}: " if row_id else ""
    if value is None or value == "" or value == {} or value == []:
        return {}
    if isinstance(value, dict):  # None: a key arrow added when it merged the rows' dicts into one struct
        return {str(k): _file_text(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        files: dict[str, str] = {}
        for item in value:
            path = next((item[k] for k in _PATH_KEYS if isinstance(item, dict) and item.get(k)), None)
            if path is None:
                raise DataError(f"{where}input_files: a list entry needs a path and a content, got {item!r:.80}")
            files[str(path)] = _file_text(next((item[k] for k in _TEXT_KEYS if k in item), ""))
        return files
    if isinstance(value, str):
        for parse in (json.loads, ast.literal_eval):
            try:
                parsed = parse(value)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
            if isinstance(parsed, (dict, list)):
                return input_files_dict(parsed, row_id)
        raise DataError(f"{where}input_files is a string, but not a serialised dict or list of files")
    raise DataError(f"{where}input_files must map paths to text, got {type(value).__name__}")


def _file_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
