"""What a qa_type's scorer returns: the correctness and what it compared (JSON-able, for `detail`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Verdict:
    correct: float  # 0..1
    detail: dict[str, Any] = field(default_factory=dict)
