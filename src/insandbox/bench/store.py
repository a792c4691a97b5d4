"""The results store of a benchmark run: results.jsonl, one line per finished sample,
appended and flushed the moment the sample is scored, so a killed run loses nothing and
`--resume` knows exactly what is done.

The file holds exactly one record per sample. A sample recorded as an infrastructure error and
run again by `--resume` replaces its old line: the file is rewritten to a temporary file and
renamed over the old one (a kill in between leaves the old file whole), and the new record's
`attempts` counts the earlier attempts too (`resumed_attempts`: how many of them were earlier)."""
from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

RESULTS = "results.jsonl"


def sample_key(rec: dict) -> tuple[str, str, int]:
    return (str(rec["id"]), rec["mode"], int(rec["repeat"]))


class ResultStore:
    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / RESULTS
        self._keys: set[tuple[str, str, int]] | None = None  # samples in the file (read on the first append)

    def load(self) -> list[dict]:
        """Every record; a half-written last line (a kill during the write) is ignored."""
        if not self.path.is_file():
            return []
        records = []
        for line in self.path.read_text(encoding="utf-8").split("\n"):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue
        return records

    def finished(self) -> dict[tuple[str, str, int], dict]:
        """The last record of each sample that finished without an infrastructure error."""
        return {sample_key(r): r for r in self.load() if not r.get("error")}

    def append(self, record: dict) -> None:
        """Add a sample's record; one already in the file (an earlier error) is replaced."""
        if self._keys is None:
            self._keys = {sample_key(r) for r in self.load()}
        key = sample_key(record)
        if key in self._keys:
            self._replace(record)
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(_line(record))
            f.flush()
            os.fsync(f.fileno())
        self._keys.add(key)

    def compact(self) -> int:
        """Rewrite the file with one record per sample (the last); returns the lines dropped. For files
        written before records were replaced, or by hand."""
        records = self.load()
        kept = latest(records)
        if len(kept) != len(records):
            self._write_all(kept)
        self._keys = {sample_key(r) for r in kept}
        return len(records) - len(kept)

    def _replace(self, record: dict) -> None:
        key, earlier = sample_key(record), 0
        kept = []
        for r in self.load():
            if sample_key(r) == key:
                earlier += int(r.get("attempts") or 0)
            else:
                kept.append(r)
        if earlier:
            record = {**record, "attempts": int(record.get("attempts") or 0) + earlier, "resumed_attempts": earlier}
        self._write_all(kept + [record])

    def _write_all(self, records: list[dict]) -> None:
        partial = self.path.with_name(self.path.name + ".part")
        with open(partial, "w", encoding="utf-8") as f:
            f.write("".join(_line(r) for r in records))
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, self.path)


def _line(record: dict) -> str:
    line = json.dumps(record, ensure_ascii=False) + "\n"
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a server: \u escapes keep it, still valid JSON
        line = json.dumps(record) + "\n"
    return line


def latest(records: Iterable[dict]) -> list[dict]:
    """One record per sample: the last one written (files of older versions may hold a sample twice)."""
    by_key: dict[tuple, dict] = {}
    for r in records:
        by_key[sample_key(r)] = r
    return list(by_key.values())
