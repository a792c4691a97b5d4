"""The results store of a benchmark run."""
from __future__ import annotations

from insandbox.bench.store import ResultStore


def test_results_store_keeps_text_that_is_not_valid_unicode(tmp_path):
    store = ResultStore(tmp_path)
    store.append({"id": "a", "mode": "llm", "repeat": 0, "answer": "bad \ud800 text"})
    store.append({"id": "b", "mode": "llm", "repeat": 0, "answer": "fine ✓"})
    assert [r["answer"] for r in store.load()] == ["bad \ud800 text", "fine ✓"]


def test_a_sample_run_again_replaces_its_errored_record(tmp_path):
    store = ResultStore(tmp_path)
    store.append({"id": "a", "mode": "llm", "repeat": 0, "attempts": 3, "error": "model_error: 503"})
    store.append({"id": "b", "mode": "llm", "repeat": 0, "attempts": 1, "error": None, "score": 0.0})
    again = ResultStore(tmp_path)  # a resumed run: a new store over the same file
    again.append({"id": "a", "mode": "llm", "repeat": 0, "attempts": 1, "error": None, "score": 1.0})
    records = again.load()
    assert [(r["id"], r["error"]) for r in records] == [("b", None), ("a", None)]  # one line per sample
    assert records[1]["attempts"] == 4 and records[1]["resumed_attempts"] == 3
    assert not (tmp_path / "results.jsonl.part").exists()


def test_compact_keeps_the_last_record_of_each_sample(tmp_path):
    import json

    lines = [{"id": "a", "mode": "llm", "repeat": 0, "error": "x"}, {"id": "a", "mode": "llm", "repeat": 1},
             {"id": "a", "mode": "llm", "repeat": 0, "error": None}]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"half')
    store = ResultStore(tmp_path)
    assert store.compact() == 1
    assert sorted(store.load(), key=lambda r: r["repeat"]) == [lines[2], lines[1]]
    assert store.compact() == 0
