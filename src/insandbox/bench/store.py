"""The results store of a benchmark run: results.jsonl, one line per finished sample,
appended and flushed the moment the sample is scored, so a killed run loses nothing and
`--resume` knows exactly what is done."""
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
        line = json.dumps(record, ensure_ascii=False) + "\n"
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate from a server: \u escapes keep it, still valid JSON
            line = json.dumps(record) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())


def latest(records: Iterable[dict]) -> list[dict]:
    """One record per sample: the last one written (a resumed sample may appear twice)."""
    by_key: dict[tuple, dict] = {}
    for r in records:
        by_key[sample_key(r)] = r
    return list(by_key.values())
