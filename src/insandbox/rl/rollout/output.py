"""A batch of rollouts written to a folder, as `insandbox rl rollout` writes it:

    FOLDER/rollouts.jsonl   one RolloutRecord per line, written (and flushed) as each rollout finishes
    FOLDER/summary.json     summarize()'s figures, and the decode check of every record (check.py)

From Python, the same files:

    rollouts = Rollouts(tokenizer, RolloutConfig(), RewardConfig())
    result = await rollouts.run_all(rows, generate, Path("out"), n=4, concurrency=8)
    result.summary["reward_mean"], result.summary["decode_check"]["mismatches"], len(result.records)

or, around any source of records (`write` takes each one as it comes):

    with RolloutWriter(Path("out"), rollouts.chat) as writer:
        records = await rollouts.run_groups(rows, generate, on_record=writer.write)
    summary = writer.finish(records)
"""
from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Optional

from .chat import ChatFormat
from .check import check_record
from .summary import summarize
from .types import RolloutRecord

RECORDS = "rollouts.jsonl"
SUMMARY = "summary.json"

OnRecord = Callable[[RolloutRecord], None]


@dataclass
class RolloutsResult:
    folder: Path
    records: list[RolloutRecord]
    summary: dict  # as written to summary.json


class RolloutWriter:
    """rollouts.jsonl, written record by record (a batch cut short keeps what finished), each record
    checked on the way: its ids must decode to the conversation the sandbox saw (check.py)."""

    def __init__(self, folder: Path, chat: ChatFormat):
        self.folder = Path(folder)
        self.chat = chat
        self.problems: dict[str, list[str]] = {}  # record id -> what the decode check found
        self.started = time.perf_counter()
        self.ended: Optional[float] = None
        self._file: Optional[IO[str]] = None

    def __enter__(self) -> RolloutWriter:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._file = open(self.folder / RECORDS, "w", encoding="utf-8")
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.ended = time.perf_counter()
        if self._file is not None:
            self._file.close()
            self._file = None

    def write(self, record: RolloutRecord) -> None:
        if self._file is None:
            raise RuntimeError("RolloutWriter.write outside its `with` block")
        found = check_record(record, self.chat)
        if found:
            self.problems[record.id] = found
        self._file.write(record.model_dump_json() + "\n")
        self._file.flush()

    def finish(self, records: list[RolloutRecord], extra: Optional[dict[str, Callable[[], dict]]] = None) -> dict:
        """The summary of `records` (those written), timed from the writer's start to its end (or now),
        with the decode check and each of `extra`'s sections; written to summary.json."""
        wall = (self.ended or time.perf_counter()) - self.started
        summary = summarize(records, wall)
        summary["decode_check"] = {"records": len(records), "mismatches": len(self.problems),
                                   "problems": self.problems}
        for key, describe in (extra or {}).items():
            summary[key] = describe()
        (self.folder / SUMMARY).write_text(json.dumps(summary, indent=1), encoding="utf-8")
        return summary


async def write_rollouts(folder: Path, chat: ChatFormat, run: Callable[[OnRecord], Awaitable[list[RolloutRecord]]],
                         extra: Optional[dict[str, Callable[[], dict]]] = None) -> RolloutsResult:
    """Run `run(write)` (rollouts that hand each record to `write` as it finishes and return them all),
    writing rollouts.jsonl as they come, then summary.json. `extra`: more summary sections, each
    described once the rollouts are done (e.g. {"ray": ...} for rollouts on a cluster)."""
    with RolloutWriter(folder, chat) as writer:
        records = await run(writer.write)
    return RolloutsResult(Path(folder), records, writer.finish(records, extra))
