"""The results store of a benchmark run: results.jsonl, one line per finished sample,
appended and flushed the moment the sample is scored, so a killed run loses nothing and
`--resume` knows exactly what is done.

The file holds exactly one record per sample. A sample recorded as an infrastructure error and
run again by `--resume` replaces its old line: the file is rewritten to a temporary file and
renamed over the old one (a kill in between leaves the old file whole), and the new record's
`attempts` counts the earlier attempts too (`resumed_attempts`: how many of them were earlier), and
`retry_cost_usd` what they cost.

A write that fails (the disk is full) leaves the file as it was: an append that got only part
of its line onto the disk is cut back, a rewrite's temporary file is removed. A half line left
by a kill during an append is dropped when the next session opens the file (`compact`), so no
later record is ever glued onto it."""
from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from ..core import hostfiles
from ..runs.layout import RESULTS


def sample_key(rec: dict) -> tuple[str, str, int]:
    return (str(rec["id"]), rec["mode"], int(rec["repeat"]))


class ResultStore:
    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / RESULTS
        self._keys: set[tuple[str, str, int]] | None = None  # samples in the file (read on the first append)

    def load(self) -> list[dict]:
        """Every record; a half-written last line (a kill during the write) is ignored."""
        return self._read()[0]

    def _read(self) -> tuple[list[dict], bool]:
        """The records, and whether the file is clean (every line a record, ending in a newline)."""
        if not self.path.is_file():
            return [], True
        text = self.path.read_bytes().decode("utf-8", errors="replace")  # a kill may cut a character in two
        records, clean = [], not text or text.endswith("\n")
        for line in text.split("\n"):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError:
                    clean = False
        return records, clean

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
        data = _line(record).encode("utf-8")
        fd = hostfiles.open_for_writing(self.path, append=True)
        try:
            size = os.fstat(fd).st_size
            try:
                view = memoryview(data)
                while view:  # unbuffered: nothing is left to be flushed after a failure
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            except OSError:
                _cut_back(fd, size)  # no half line: the file stays as it was
                raise
        finally:
            os.close(fd)
        self._keys.add(key)

    def compact(self) -> int:
        """Rewrite the file with one record per sample (the last), without a half line a kill left;
        returns the records dropped. For files written before records were replaced, or by hand."""
        records, clean = self._read()
        kept = latest(records)
        if len(kept) != len(records) or not clean:
            self._write_all(kept)
        self._keys = {sample_key(r) for r in kept}
        return len(records) - len(kept)

    def _replace(self, record: dict) -> None:
        key, earlier, spent = sample_key(record), 0, 0.0
        kept = []
        for r in self.load():
            if sample_key(r) == key:
                earlier += int(r.get("attempts") or 0)
                spent += (r.get("cost_usd") or 0.0) + (r.get("retry_cost_usd") or 0.0)
            else:
                kept.append(r)
        if earlier:
            record = {**record, "attempts": int(record.get("attempts") or 0) + earlier,
                      "resumed_attempts": int(record.get("resumed_attempts") or 0) + earlier}
        if spent:  # what the replaced attempts cost stays in the benchmark's cost
            record = {**record, "retry_cost_usd": round((record.get("retry_cost_usd") or 0.0) + spent, 10)}
        self._write_all(kept + [record])

    def _write_all(self, records: list[dict]) -> None:
        write_atomic(self.path, "".join(_line(r) for r in records), suffix=".part")


def write_atomic(path: Path, text: str, suffix: str = ".tmp") -> None:
    """Write beside and rename over: a kill or a full disk leaves the old file whole (and no
    temporary file behind when the write failed)."""
    partial = path.with_name(path.name + suffix)
    try:
        with os.fdopen(hostfiles.open_for_writing(partial), "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _cut_back(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass


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
