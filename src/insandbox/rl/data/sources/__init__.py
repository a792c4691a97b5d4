"""One reader per source format; `recognise` says which one a folder is laid out for, and
`source_folders` finds the sources inside a folder that holds several (as ../shared/data/rl_sources does)."""
from __future__ import annotations

from pathlib import Path

from . import aqua, fairytaleqa, logiqa, mctest, qed, race, tweeteval, wikitablequestions
from .reader import Reader, SourceError

READERS: tuple[Reader, ...] = tuple(m.READER for m in (
    qed, wikitablequestions, fairytaleqa, mctest, race, logiqa, aqua, tweeteval))
BY_NAME = {r.name: r for r in READERS}

__all__ = ["READERS", "BY_NAME", "Reader", "SourceError", "recognise", "source_folders"]


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


def _fits(folder: Path) -> bool:
    try:
        return any(r.recognise(folder) for r in READERS)
    except OSError:
        return True  # recognise() says what is wrong with it


def source_folders(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """(source folders, subfolders skipped). A path that a reader recognises stays as it is; a folder no
    reader recognises but some of whose subfolders one does stands for those subfolders (one level down,
    in name order), and its other subfolders are skipped. Anything else stays, for `recognise` to name."""
    found: list[Path] = []
    skipped: list[Path] = []
    for path in paths:
        if not path.is_dir() or _fits(path):
            found.append(path)
            continue
        try:
            subfolders = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
        except OSError:
            subfolders = []
        sources = [p for p in subfolders if _fits(p)]
        if not sources:
            found.append(path)
            continue
        found += sources
        skipped += [p for p in subfolders if p not in sources]
    return found, skipped
