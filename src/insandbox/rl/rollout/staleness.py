"""Staleness: how many policy versions behind the trainer's weights a record was sampled.

A record's `policy_version` is the oldest version that sampled any of its turns. With the trainer
at version `current`, the record is `current - policy_version` versions stale; past the bound it
is dropped before the loss (an asynchronous trainer's importance-sampling correction holds only
for a small gap). A record whose version is unknown cannot be checked and is dropped too, counted
apart: with a bound set, nothing of unknown age reaches the loss.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Optional, Protocol, TypeVar


class Versioned(Protocol):
    policy_version: Optional[int]


R = TypeVar("R", bound=Versioned)


@dataclass
class StalenessSplit(Generic[R]):
    fresh: list[R] = field(default_factory=list)
    stale: list[R] = field(default_factory=list)  # older than the bound
    unversioned: list[R] = field(default_factory=list)  # no version: cannot be checked, dropped

    @property
    def dropped(self) -> int:
        return len(self.stale) + len(self.unversioned)

    def counts(self) -> dict[str, int]:
        return {"kept": len(self.fresh), "dropped_stale": len(self.stale), "dropped_unversioned": len(self.unversioned)}


def staleness(record: Versioned, current: int) -> Optional[int]:
    """Versions between the record's sampler and `current` (None: the record's version is unknown)."""
    return None if record.policy_version is None else current - record.policy_version


def split_stale(records: Sequence[R], current: int, bound: Optional[int]) -> StalenessSplit[R]:
    """The records within `bound` versions of `current`, and those dropped (bound None: all kept)."""
    split: StalenessSplit[R] = StalenessSplit()
    for record in records:
        gap = staleness(record, current)
        if bound is None:
            split.fresh.append(record)
        elif gap is None:
            split.unversioned.append(record)
        elif gap > bound:
            split.stale.append(record)
        else:
            split.fresh.append(record)
    return split
