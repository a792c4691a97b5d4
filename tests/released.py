"""Rows in the exact schema of the paper's released RL data (daixuancheng/llm-in-sandbox-rl, config
instruct_pretrain, split train: id, problem_statement, ground_truth, input_files, domain, qa_type),
written as `datasets` folders in tmp_path: no hub, no network."""
from __future__ import annotations

import json
from pathlib import Path

RELEASED_COLUMNS = ["id", "problem_statement", "ground_truth", "input_files", "domain", "qa_type"]


def released_rows() -> list[dict]:
    """Three rows, one per qa_type; input_files as the hub stores them, a JSON string of {path: text}."""
    return [
        {"id": "ip-0", "problem_statement": "Which animal is named in the story? A. fox B. owl C. bear D. hare. The "
                                            "material is in /testbed/documents.", "ground_truth": "B",
         "input_files": json.dumps({"documents/story.txt": "The owl sat still.", "documents/other.txt": "Rain."}),
         "domain": "fiction", "qa_type": "single-choice"},
        {"id": "ip-1", "problem_statement": "Which statements are true? A. x B. y C. z D. w", "ground_truth": "A, C",
         "input_files": json.dumps({"documents/a.txt": "x and z hold."}), "domain": "academic",
         "qa_type": "multi-choice"},
        {"id": "ip-2", "problem_statement": "What is the capital named in the paragraph?", "ground_truth": "Paris",
         "input_files": "{}", "domain": "encyclopedia", "qa_type": "open"},
    ]


def save_dataset(folder: Path, rows: list[dict] | None = None) -> Path:
    """Dataset.save_to_disk of the rows."""
    import datasets

    datasets.Dataset.from_list(rows or released_rows()).save_to_disk(str(folder))
    return folder


def save_dataset_dict(folder: Path, splits: dict[str, list[dict]] | None = None) -> Path:
    """DatasetDict.save_to_disk, a train split of the rows unless told otherwise."""
    import datasets

    splits = splits or {"train": released_rows()}
    datasets.DatasetDict({name: datasets.Dataset.from_list(rows) for name, rows in splits.items()}).save_to_disk(
        str(folder))
    return folder
