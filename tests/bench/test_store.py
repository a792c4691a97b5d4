"""The results store of a benchmark run."""
from __future__ import annotations

from insandbox.bench.store import ResultStore


def test_results_store_keeps_text_that_is_not_valid_unicode(tmp_path):
    store = ResultStore(tmp_path)
    store.append({"id": "a", "mode": "llm", "repeat": 0, "answer": "bad \ud800 text"})
    store.append({"id": "b", "mode": "llm", "repeat": 0, "answer": "fine ✓"})
    assert [r["answer"] for r in store.load()] == ["bad \ud800 text", "fine ✓"]
