"""The whole build on tiny folders: deterministic for a seed, the options honoured, the
manifest's counts those of the rows, the `datasets` copy the same rows."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from insandbox.rl.data.build import build
from insandbox.rl.data.output import jsonl_text, write
from insandbox.rl.data.settings import Settings
from insandbox.rl.data.sources import SourceError
from insandbox.rl.schema import DOMAINS
from tests.rl.data import tiny

DOMAIN_OF = {"qed": "encyclopedia", "wikitablequestions": "encyclopedia", "fairytaleqa": "fiction",
             "mctest": "fiction", "race": "academic", "logiqa": "academic", "aqua": "academic",
             "tweeteval": "social_media"}


def test_same_seed_same_bytes_other_seed_other_rows(tmp_path):
    folders = tiny.all_sources(tmp_path)
    first = jsonl_text(build(folders, Settings(seed=7)).rows)
    again = jsonl_text(build(list(reversed(folders)), Settings(seed=7)).rows)  # folder order does not matter
    assert first == again
    other = jsonl_text(build(folders, Settings(seed=8)).rows)
    assert other != first


def test_rows_cover_every_source_domain_and_qa_type(tmp_path):
    rows = tiny.build_all(tmp_path).rows
    assert {r["source"] for r in rows} == set(DOMAIN_OF)
    assert all(r["domain"] == DOMAIN_OF[r["source"]] for r in rows)
    assert {r["domain"] for r in rows} == set(DOMAINS)
    assert {r["qa_type"] for r in rows} == {"single-choice", "multi-choice", "open"}
    assert {r["answer_type"] for r in rows if r["qa_type"] == "open"} == {"text", "number"}
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) and all(i.startswith(r["source"] + "-") for i, r in zip(ids, rows))
    assert all(r["input_files"] for r in rows)


def test_limit_qa_types_and_a_task_that_stays_the_same(tmp_path):
    full = {r["id"]: r for r in tiny.build_all(tmp_path).rows}
    limited = tiny.build_all(tmp_path, limit=2).rows
    assert max(Counter(r["source"] for r in limited).values()) == 2
    for r in limited:  # a task's documents and answer do not depend on which others are built
        assert r["input_files"] == full[r["id"]]["input_files"] and r["ground_truth"] == full[r["id"]]["ground_truth"]
    only_open = tiny.build_all(tmp_path, qa_types=("open",)).rows
    assert {r["qa_type"] for r in only_open} == {"open"}
    assert {r["source"] for r in only_open} == {"qed", "wikitablequestions", "fairytaleqa", "aqua", "tweeteval"}


def test_manifest_counts_are_the_rows_and_the_dataset_loads(tmp_path):
    import datasets

    result = tiny.build_all(tmp_path, seed=3, limit=5)
    record = write(result, tmp_path / "out")
    lines = (tmp_path / "out" / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines]
    assert rows == result.rows
    counts = record["counts"]
    assert counts["tasks"] == len(rows)
    assert counts["by_source"] == dict(Counter(r["source"] for r in rows))
    assert counts["by_domain"] == dict(Counter(r["domain"] for r in rows))
    assert counts["by_qa_type"] == dict(Counter(r["qa_type"] for r in rows))
    assert sum(sum(v.values()) for v in counts["by_source_and_qa_type"].values()) == len(rows)
    assert json.loads((tmp_path / "out" / "manifest.json").read_text()) == record
    assert record["seed"] == 3 and record["settings"]["limit"] == 5 and record["settings"]["distractors"] == [2, 5]
    assert record["inputs"] == [str((tmp_path / "src" / name).resolve()) for name in sorted(DOMAIN_OF)]
    assert all(s["tasks"] == counts["by_source"][n] for n, s in record["sources"].items())
    ds = datasets.load_from_disk(str(tmp_path / "out" / "dataset"))
    assert len(ds) == len(rows) and ds.column_names == list(rows[0])
    for row, loaded in zip(rows, ds):
        assert json.loads(loaded["input_files"]) == row["input_files"]
        assert {k: v for k, v in loaded.items() if k != "input_files"} == {
            k: v for k, v in row.items() if k != "input_files"}


def test_two_folders_of_one_source_are_refused(tmp_path):
    a, b = tiny.qed(tmp_path / "a"), tiny.qed(tmp_path / "b")
    with pytest.raises(SourceError, match="two source folders are qed"):
        build([a, b], Settings())


def test_settings_are_checked():
    for bad in ({"distractors": (3, 2)}, {"qa_types": ("essay",)}, {"qa_types": ()}, {"limit": 0},
                {"examples": -1}, {"merge_share": 1.5}):
        with pytest.raises(ValueError):
            Settings(**bad)


def test_heldout_tasks_are_set_aside_and_never_shown_in_training(tmp_path):
    full = {r["id"]: r for r in tiny.build_all(tmp_path, examples=2).rows}
    result = tiny.build_all(tmp_path, examples=2, heldout=1)
    training, heldout = {r["id"]: r for r in result.rows}, {r["id"]: r for r in result.heldout}
    assert Counter(r["source"] for r in heldout.values()) == Counter({s: 1 for s in DOMAIN_OF})
    assert not set(training) & set(heldout) and set(training) | set(heldout) <= set(full)
    for row in heldout.values():  # the same task as in a build without held-out ones
        assert row["input_files"] == full[row["id"]]["input_files"]
        assert row["ground_truth"] == full[row["id"]]["ground_truth"]
    for row in training.values():  # no held-out answer reaches a training prompt
        assert not set(row["example_ids"]) & set(heldout)
        assert set(row["example_ids"]) <= set(training)
    record = write(result, tmp_path / "out")
    written = (tmp_path / "out" / "heldout.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["id"] for line in written] == [r["id"] for r in result.heldout]
    assert record["heldout"]["tasks"] == len(heldout) and record["counts"]["tasks"] == len(training)
    write(tiny.build_all(tmp_path), tmp_path / "out")  # a build without them removes the old file
    assert not (tmp_path / "out" / "heldout.jsonl").exists()


def test_a_held_out_material_keeps_its_other_questions_out_of_training():
    from insandbox.rl.data.build import split_heldout
    from insandbox.rl.data.tasks import Task

    tasks = [Task(source="race", uid=f"{m}-q{q}", context=f"passage {m}", parts=[], form=None)
             for m, q in [(1, 1), (2, 1), (1, 2), (3, 1), (2, 2)]]
    training, heldout, dropped = split_heldout(tasks, 2)
    assert [t.uid for t in heldout] == ["1-q1", "2-q1"]
    assert [t.uid for t in training] == ["3-q1"] and dropped == 2
    assert split_heldout(tasks, 0) == (tasks, [], 0)
