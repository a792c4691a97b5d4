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


def test_what_a_replaced_record_cost_stays_in_the_new_ones_retry_cost(tmp_path):
    store = ResultStore(tmp_path)
    store.append({"id": "a", "mode": "sandbox", "repeat": 0, "attempts": 2, "error": "sandbox_error: gone",
                  "cost_usd": 0.25, "retry_cost_usd": 0.5})
    ResultStore(tmp_path).append({"id": "a", "mode": "sandbox", "repeat": 0, "attempts": 2, "error": None,
                                  "cost_usd": 1.0, "retry_cost_usd": 0.125})
    (record,) = store.load()
    assert record["cost_usd"] == 1.0 and record["retry_cost_usd"] == 0.875  # 0.125 + 0.25 + 0.5
    store.append({"id": "b", "mode": "llm", "repeat": 0, "error": "model_error", "cost_usd": None})
    store.append({"id": "b", "mode": "llm", "repeat": 0, "error": None, "cost_usd": None})  # unknown price
    assert "retry_cost_usd" not in store.load()[-1]


def test_compact_keeps_the_last_record_of_each_sample(tmp_path):
    import json

    lines = [{"id": "a", "mode": "llm", "repeat": 0, "error": "x"}, {"id": "a", "mode": "llm", "repeat": 1},
             {"id": "a", "mode": "llm", "repeat": 0, "error": None}]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"half')
    store = ResultStore(tmp_path)
    assert store.compact() == 1
    assert sorted(store.load(), key=lambda r: r["repeat"]) == [lines[2], lines[1]]
    assert store.compact() == 0


def test_a_half_line_left_by_a_kill_is_dropped_before_the_next_record(tmp_path):
    """Regression: a record appended after a half line (a kill during a write) was glued onto it and lost."""
    import json

    whole = {"id": "a", "mode": "llm", "repeat": 0, "error": None, "answer": "é"}
    half = json.dumps({"id": "b", "mode": "llm", "repeat": 0, "answer": "日本"}, ensure_ascii=False).encode()[:-5]
    (tmp_path / "results.jsonl").write_bytes((json.dumps(whole) + "\n").encode() + half)  # cut inside a character
    store = ResultStore(tmp_path)  # the next session
    assert store.load() == [whole]
    assert store.compact() == 0
    store.append({"id": "b", "mode": "llm", "repeat": 0, "error": None})
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["a", "b"]


def test_a_failed_write_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    """A full disk: the append that got half its line out is cut back; a failed rewrite keeps the old file."""
    import errno
    import os

    import pytest

    store = ResultStore(tmp_path)
    store.append({"id": "a", "mode": "llm", "repeat": 0, "error": "x", "attempts": 1})
    before = (tmp_path / "results.jsonl").read_bytes()
    real_write = os.write

    def disk_full(fd, data):  # the first 10 bytes fit, then the device is full
        if len(data) > 10:
            return real_write(fd, bytes(data[:10]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", disk_full)
    with pytest.raises(OSError):
        store.append({"id": "b", "mode": "llm", "repeat": 0, "error": None})
    monkeypatch.undo()
    assert (tmp_path / "results.jsonl").read_bytes() == before

    def no_rename(*a):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(OSError):
        store.append({"id": "a", "mode": "llm", "repeat": 0, "error": None, "attempts": 1})  # a rewrite
    monkeypatch.undo()
    assert (tmp_path / "results.jsonl").read_bytes() == before
    assert not (tmp_path / "results.jsonl.part").exists()
    store.append({"id": "b", "mode": "llm", "repeat": 0, "error": None})  # space again: it goes on
    assert [r["id"] for r in store.load()] == ["a", "b"]
