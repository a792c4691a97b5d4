"""`insandbox rl build-data`: context tasks from reading-comprehension source folders.

Exit status: 0 written; 1 writing failed; 2 bad arguments, an unusable source folder, or no
task to write (one line on stderr, nothing written).
"""
from __future__ import annotations

import importlib.util
import re
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

QA_TYPES_DEFAULT = "single-choice,multi-choice,open"


def _distractors(value: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", value)
    if not m:
        raise ValueError(f"--distractors wants MIN-MAX or N, e.g. 2-5, got {value!r}")
    lo = int(m.group(1))
    return lo, int(m.group(2)) if m.group(2) is not None else lo


def _source_folders(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """(folders, plain files skipped): a shell glob over a data folder also matches its READMEs."""
    folders, files = [], []
    for p in paths:
        (files if p.is_file() else folders).append(p)
    return folders, files


def build_data(
    sources: Annotated[list[Path], typer.Option(
        "--sources", metavar="DIR", show_default=False,
        help="Source folders, one per source (qed, wikitablequestions, fairytaleqa, mctest, race, logiqa, aqua, "
             "tweeteval), in any order, or a folder that holds them (each subfolder a source is found; the others "
             "are skipped); the paths that follow it count too, so a shell glob works (plain files among them are "
             "skipped).")],
    out: Annotated[Path, typer.Option(
        metavar="DIR", show_default=False,
        help="Output folder: tasks.jsonl, dataset/ (datasets save_to_disk) and manifest.json.")],
    more_sources: Annotated[Optional[list[Path]], typer.Argument(
        metavar="DIR", show_default=False,
        help="More source folders (what a glob after --sources expands to).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of every random choice; the same inputs, seed and options give "
                                           "byte-identical tasks.jsonl.")] = 0,
    per_source: Annotated[Optional[int], typer.Option(help="Tasks per source at most (a seeded sample).",
                                                      show_default="all")] = None,
    distractors: Annotated[str, typer.Option(help="Distractor documents beside a single document, MIN-MAX (drawn "
                                                  "per task) or N; 0 for none.")] = "2-5",
    examples: Annotated[int, typer.Option(help="In-context examples per task: earlier tasks of the same source and "
                                               "qa_type, with their answers (0: none).")] = 2,
    qa_types: Annotated[str, typer.Option(help="The qa_types to build, comma-separated: single-choice, multi-choice, "
                                               "open.")] = QA_TYPES_DEFAULT,
    max_doc_chars: Annotated[int, typer.Option(help="Skip tasks with a document longer than this many characters "
                                                    "(and never use one as a distractor).")] = 20_000,
    max_answer_words: Annotated[int, typer.Option(help="Skip open text questions whose every accepted answer is "
                                                       "longer than this many words.")] = 10,
    merge_share: Annotated[float, typer.Option(help="Share of the materials with 3+ single-choice questions (RACE, "
                                                    "MCTest) asked as one multi-choice 'which statements are true' "
                                                    "question instead.")] = 0.5,
    heldout: Annotated[int, typer.Option(help="Tasks per source set aside in heldout.jsonl for evaluation, on "
                                              "material that no training task has.")] = 0,
    force: Annotated[bool, typer.Option("--force", help="Replace tasks.jsonl, dataset/ and manifest.json if --out "
                                                        "already has them.")] = False,
) -> None:
    """Build context tasks (material as files in /testbed/documents) from reading-comprehension data."""
    from ..rl.data.build import build
    from ..rl.data.output import HELDOUT, OUTPUTS, existing_outputs, write
    from ..rl.data.settings import Settings
    from ..rl.data.sources import SourceError, source_folders
    from .common import fail

    started = time.monotonic()
    folders, skipped_files = _source_folders(list(sources) + list(more_sources or []))
    try:
        settings = Settings(seed=seed, limit=per_source, distractors=_distractors(distractors), examples=examples,
                            qa_types=tuple(t.strip() for t in qa_types.split(",") if t.strip()),
                            max_doc_chars=max_doc_chars, max_answer_words=max_answer_words, merge_share=merge_share,
                            heldout=heldout)
    except ValueError as e:
        fail(str(e))
    if not folders:
        fail("--sources: no source folders given")
    folders, skipped_folders = source_folders(folders)
    if out.exists() and not out.is_dir():
        fail(f"--out {out} is a file, not a folder")
    there = existing_outputs(out) if out.is_dir() else []
    if there and not force:
        fail(f"--out {out} already holds {', '.join(there)}; pass --force to replace them")
    if importlib.util.find_spec("datasets") is None:
        fail("writing the dataset needs `datasets`: pip install 'insandbox[rl]'", 1)
    for f in skipped_files:
        typer.echo(f"insandbox: skipping {f}: not a folder", err=True)
    for f in skipped_folders:
        typer.echo(f"insandbox: skipping {f}: not a known source", err=True)

    try:
        result = build(folders, settings)
    except SourceError as e:
        fail(str(e))
    if not result.rows:
        fail(f"no tasks: nothing in {', '.join(s.name for s in result.sources)} fits --qa-types "
             f"{','.join(settings.qa_types)} and the other options")
    try:
        record = write(result, out)
    except OSError as e:
        fail(f"cannot write to {out}: {e.strerror or e}", 1)

    counts = record["counts"]
    typer.echo(f"wrote {counts['tasks']} tasks to {out} ({', '.join(OUTPUTS)}) in {time.monotonic() - started:.1f} s")
    if record["heldout"]["tasks"]:
        typer.echo(f"  and {record['heldout']['tasks']} held-out tasks to {out / HELDOUT}")
    for name, by_type in counts["by_source_and_qa_type"].items():
        detail = ", ".join(f"{k} {v}" for k, v in by_type.items())
        typer.echo(f"  {name:<20} {counts['by_source'][name]:>6}  ({detail})")
