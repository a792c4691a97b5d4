"""Everything that decides what `build-data` writes, besides the input folders (all of it goes
into the manifest)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

from ..schema import QA_TYPES


@dataclass(frozen=True)
class Settings:
    seed: int = 0
    limit: Optional[int] = None  # tasks per source at most (a seeded sample); None: all
    distractors: tuple[int, int] = (2, 5)  # distractor documents per single-document task, drawn uniformly
    examples: int = 2  # in-context examples per task
    qa_types: tuple[str, ...] = QA_TYPES
    max_doc_chars: int = 20_000  # a task with a longer document is skipped; longer distractors are not used
    max_answer_words: int = 10  # open text questions whose every accepted answer is longer are skipped
    merge_share: float = 0.5  # of the materials with enough single-choice questions, the share merged
    heldout: int = 0  # tasks per source set aside for evaluation (heldout.jsonl), on material training never sees

    def __post_init__(self) -> None:
        lo, hi = self.distractors
        if not 0 <= lo <= hi:
            raise ValueError(f"distractors: want 0 <= MIN <= MAX, got {lo}-{hi}")
        unknown = set(self.qa_types) - set(QA_TYPES)
        if unknown or not self.qa_types:
            raise ValueError(f"qa types: want some of {', '.join(QA_TYPES)}, got {', '.join(self.qa_types) or 'none'}")
        if self.limit is not None and self.limit < 1:
            raise ValueError("limit: want at least 1")
        if self.examples < 0 or self.max_doc_chars < 1 or self.max_answer_words < 1:
            raise ValueError("examples must be >= 0, max_doc_chars and max_answer_words >= 1")
        if self.heldout < 0:
            raise ValueError("heldout: want 0 or more tasks per source")
        if not 0.0 <= self.merge_share <= 1.0:
            raise ValueError("merge_share: want a share between 0 and 1")

    def as_record(self) -> dict[str, Any]:
        record = asdict(self)
        record["distractors"] = list(self.distractors)
        record["qa_types"] = list(self.qa_types)
        return record
