"""What `build-data` writes into --out:

    tasks.jsonl     one TaskRow a line (input_files a JSON object)
    dataset/        the same rows as a Hugging Face `datasets` dataset (save_to_disk); input_files
                    is the object serialised as a JSON string, as in the benchmark datasets (one
                    column, whatever the file names), which bench.data.parse_input_files reads
    heldout.jsonl   with --heldout N: N tasks per source for evaluation (`insandbox bench --data`),
                    on material no row of tasks.jsonl has
    manifest.json   counts per source, domain and qa_type; the seed, every setting and the input
                    folders; what each source skipped and why; the JSONL's sha256

Nothing in them depends on the time or the machine but the input folders' paths, so the same
inputs, seed and settings give byte-identical tasks.jsonl and manifest.json.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from .build import Build
from .merge import MAX_STATEMENTS, MIN_STATEMENTS
from .sources import tweeteval, wikitablequestions

JSONL = "tasks.jsonl"
DATASET = "dataset"
MANIFEST = "manifest.json"
HELDOUT = "heldout.jsonl"
OUTPUTS = (JSONL, DATASET, MANIFEST)
FORMAT = "insandbox-rl-tasks/1"

# fixed choices of the readers and the merge, recorded so a manifest says everything
CONSTANTS = {
    "merge_statements": [MIN_STATEMENTS, MAX_STATEMENTS],
    "tweeteval_group_size": list(tweeteval.GROUP_SIZE),
    "tweeteval_groups_per_label_set": tweeteval.GROUPS_PER_LABEL_SET,
    "wikitablequestions_max_options": wikitablequestions.MAX_OPTIONS,
    "wikitablequestions_max_list": wikitablequestions.MAX_LIST,
}


def existing_outputs(out: Path) -> list[str]:
    return [name for name in (*OUTPUTS, HELDOUT) if (out / name).exists()]


def jsonl_text(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def _counts(rows: list[dict[str, Any]], *keys: str) -> dict[str, Any]:
    if len(keys) == 1:
        return dict(sorted(Counter(r[keys[0]] for r in rows).items()))
    nested: dict[str, Any] = {}
    for r in rows:
        inner = nested.setdefault(r[keys[0]], {})
        inner[r[keys[1]]] = inner.get(r[keys[1]], 0) + 1
    return {k: dict(sorted(v.items())) for k, v in sorted(nested.items())}


def manifest(result: Build, jsonl_sha256: str) -> dict[str, Any]:
    from ... import __version__

    rows = result.rows
    return {
        "format": FORMAT,
        "insandbox_version": __version__,
        "seed": result.settings.seed,
        "settings": result.settings.as_record(),
        "constants": CONSTANTS,
        "inputs": [s.folder for s in result.sources],
        "counts": {
            "tasks": len(rows),
            "by_source": _counts(rows, "source"),
            "by_domain": _counts(rows, "domain"),
            "by_qa_type": _counts(rows, "qa_type"),
            "by_answer_type": _counts([r for r in rows if r["qa_type"] == "open"], "answer_type"),
            "by_source_and_qa_type": _counts(rows, "source", "qa_type"),
            "documents_per_task": {str(n): c for n, c in sorted(Counter(len(r["input_files"]) for r in rows).items())},
        },
        "heldout": {"tasks": len(result.heldout), "by_source": _counts(result.heldout, "source"),
                    "by_qa_type": _counts(result.heldout, "qa_type")},
        "sources": {s.name: {"folder": s.folder, "domain": s.domain, "items": s.items, "tasks": s.tasks,
                             "heldout": s.heldout,
                             "skipped": s.skipped, "fewer_distractors": s.fewer_distractors}
                    for s in result.sources},
        "files": {"jsonl": JSONL, "jsonl_sha256": jsonl_sha256, "dataset": DATASET,
                  "dataset_input_files": "JSON string"},
    }


def save_dataset(rows: list[dict[str, Any]], path: Path, fingerprint: str) -> None:
    """The rows (at least one: `datasets` cannot load an empty save) as a `datasets` dataset;
    `fingerprint` (the JSONL's hash) spares hashing the table, which takes longer than writing
    it, and keeps the folder the same between builds."""
    import datasets  # slow to import: only when writing
    import pyarrow as pa

    text = datasets.Value("string")
    listed = {"options", "aliases", "example_ids"}
    columns = list(rows[0])
    features = datasets.Features({c: datasets.Sequence(text) if c in listed else text for c in columns})
    data = {c: [json.dumps(r[c], ensure_ascii=False) if c == "input_files" else r[c] for r in rows] for c in columns}
    table = pa.Table.from_pydict(data, schema=features.arrow_schema)
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        datasets.Dataset(table, fingerprint=fingerprint).save_to_disk(str(path))
    finally:
        if bars:
            datasets.enable_progress_bars()


def write(result: Build, out: Path) -> dict[str, Any]:
    """Write the three outputs (replacing earlier ones of the same names); returns the manifest."""
    if not result.rows:
        raise ValueError("no rows to write")
    out.mkdir(parents=True, exist_ok=True)
    text = jsonl_text(result.rows)
    (out / JSONL).write_text(text, encoding="utf-8")
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if (out / DATASET).exists():
        shutil.rmtree(out / DATASET)
    save_dataset(result.rows, out / DATASET, digest[:16])
    if result.heldout:
        (out / HELDOUT).write_text(jsonl_text(result.heldout), encoding="utf-8")
    else:
        (out / HELDOUT).unlink(missing_ok=True)  # an earlier build's, replaced by --force
    record = manifest(result, digest)
    (out / MANIFEST).write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return record
