"""One reader per source format; `recognise` says which one a folder is laid out for."""
from __future__ import annotations

from pathlib import Path

from . import aqua, fairytaleqa, logiqa, mctest, qed, race, tweeteval, wikitablequestions
from .reader import Reader, SourceError

READERS: tuple[Reader, ...] = tuple(m.READER for m in (
    qed, wikitablequestions, fairytaleqa, mctest, race, logiqa, aqua, tweeteval))
BY_NAME = {r.name: r for r in READERS}

__all__ = ["READERS", "BY_NAME", "Reader", "SourceError", "recognise"]


def recognise(folder: Path) -> Reader:
    """The reader for a source folder; SourceError (naming the folder) when none or several fit."""
    if not folder.exists():
        raise SourceError(f"source folder {folder} does not exist")
    if not folder.is_dir():
        raise SourceError(f"source {folder} is not a folder")
    try:
        fits = [r for r in READERS if r.recognise(folder)]
    except OSError as e:
        raise SourceError(f"source folder {folder}: {e.strerror or e}") from None
    if not fits:
        known = "; ".join(f"{r.name}: {r.layout}" for r in READERS)
        raise SourceError(f"source folder {folder} is not laid out like any known source ({known})")
    if len(fits) > 1:
        raise SourceError(f"source folder {folder} fits several sources ({', '.join(r.name for r in fits)}); "
                          "pass each source's own folder")
    return fits[0]
