"""A run's input files: what a run records about them, and where a replay finds them again.

A run records in `trajectory.task`:
- `input_dir`: the host folder given with --input-dir (the folder itself stays where it is);
- `input_files`: the names of the in-memory files (a benchmark row's documents), whose bytes are
  also kept in the run folder under `inputs/`, because nothing else on the host keeps them;
- `input_digests`: {path under the sandbox's input folder: sha256} of everything placed there
  (the folder's files, then the in-memory ones over them), so a replay can tell whether it
  starts from the same inputs.

A replay or fork reads the in-memory files back from `inputs/` without following links, and never
reads the recorded `input_dir` (a run folder may name any host folder there): a run that had one
replays with `--input-dir`. Runs recorded before `inputs/` and `input_digests` existed still
replay; a replay says what it cannot check or find.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from ..core.errors import DataError
from ..sandbox.copyback import host_path
from .layout import INPUTS as INPUTS_DIR  # in the run folder: the in-memory input files, as the sandbox got them

INPUTS_MAX_BYTES = 2 * 1024 ** 3  # all of them together, as a replay reads them back


class InputsMissing(DataError):
    """The recorded run's input files cannot be found; the message says which and what to pass."""


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def folder_digests(folder: Path) -> dict[str, str]:
    """sha256 of each regular file under `folder` (links not followed), by "/"-separated relative path."""
    out = {}
    for p in sorted(Path(folder).rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[p.relative_to(folder).as_posix()] = _digest(p.read_bytes())
    return out


def as_bytes(files: dict[str, Union[str, bytes]]) -> dict[str, bytes]:
    return {k: v.encode("utf-8") if isinstance(v, str) else v for k, v in files.items()}


def input_digests(input_dir: Optional[Path], files: dict[str, Union[str, bytes]]) -> dict[str, str]:
    """What the sandbox's input folder will hold, by digest (in-memory files win over the folder's)."""
    digests = folder_digests(Path(input_dir)) if input_dir is not None else {}
    digests.update({name: _digest(data) for name, data in as_bytes(files).items()})
    return digests


def save_input_files(run_dir: Path, files: dict[str, Union[str, bytes]]) -> list[str]:
    """Keep the in-memory input files in run_dir/inputs/ (for replay and fork); returns the names
    that could not be kept (a name leading outside the folder)."""
    refused = []
    dest = Path(run_dir) / INPUTS_DIR
    for name, data in as_bytes(files).items():
        target = host_path(dest, name)
        if target is None:
            refused.append(name)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return refused


@dataclass
class FoundInputs:
    """What a replay places in the sandbox's input folder, and how it compares with the record."""

    input_dir: Optional[Path] = None
    files: dict[str, bytes] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what could not be checked, or differs
    matches: Optional[bool] = None  # the same digests as recorded; None: the run recorded none


def find_inputs(task: dict, run_dir: Path, override: Optional[Path] = None) -> FoundInputs:
    """The recorded run's inputs: `override` (a folder the user gave) if given, else the in-memory
    files kept in run_dir/inputs/, read without following links (safe_files.py). A host folder the
    run names is never read on its word: InputsMissing asks for --input-dir instead, as it does when
    the kept files are gone; UnsafeRunFolder when one of them is a link or not a plain file."""
    from .safe_files import INPUT_FILE_MAX_BYTES, UnsafeRunFolder, read_file

    found = FoundInputs()
    listed = task.get("input_files") or []
    names = [str(n) for n in listed] if isinstance(listed, list) else []
    recorded_dir = task.get("input_dir")
    if override is not None:
        if not Path(override).is_dir():
            raise InputsMissing(f"--input-dir {override}: not a folder")
        found.input_dir = Path(override)
    else:
        if recorded_dir:
            raise InputsMissing(f"the run took its input files from the host folder {recorded_dir}, which a replay "
                                "never reads on a run folder's word; pass --input-dir with that folder (or a copy)")
        missing, total = [], 0
        for name in names:
            parts = [p for p in name.split("/") if p not in ("", ".")]
            try:
                if not parts or ".." in parts:  # a name leading elsewhere: never kept
                    raise FileNotFoundError(name)
                data = read_file(Path(run_dir), "/".join([INPUTS_DIR, *parts]), INPUT_FILE_MAX_BYTES)
            except FileNotFoundError:
                missing.append(name)
                continue
            total += len(data)
            if total > INPUTS_MAX_BYTES:
                raise UnsafeRunFolder(f"the input files in {Path(run_dir) / INPUTS_DIR} hold more than "
                                      f"{INPUTS_MAX_BYTES:,} bytes, more than insandbox reads from a run folder")
            found.files[name] = data
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise InputsMissing(f"the run's in-memory input files ({shown}) are not in {Path(run_dir) / INPUTS_DIR} "
                                "(runs recorded before insandbox kept them); pass --input-dir with a folder "
                                "holding them")
    recorded = task.get("input_digests")
    if not isinstance(recorded, dict):
        if names or recorded_dir:
            found.notes.append("the run recorded no digests of its input files: they are not checked")
        return found
    now = input_digests(found.input_dir, found.files)
    differ = sorted(k for k in set(recorded) | set(now) if recorded.get(k) != now.get(k))
    found.matches = not differ
    if differ:
        shown = ", ".join(differ[:5]) + (f" and {len(differ) - 5} more" if len(differ) > 5 else "")
        found.notes.append(f"the input files differ from the recorded ones: {shown}")
    return found
