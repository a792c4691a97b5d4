"""The contract every source reader meets (one module per source format)."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ....core.errors import DataError
from ..items import Item, ReadOptions, Skips


class SourceError(DataError):
    """A source folder is unusable; the message names the folder and says why."""


@dataclass(frozen=True)
class Reader:
    name: str  # the row's `source`
    domain: str  # one of schema.DOMAINS
    material: str  # what one part is, for the prompt ("Wikipedia paragraph", "table")
    layout: str  # the files it looks for, for the error message when nothing matches
    recognise: Callable[[Path], bool]
    read: Callable[[Path, ReadOptions, Skips], Iterable[Item]]
