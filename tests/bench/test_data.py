"""Benchmarks: scorers on the dev sets, each task end to end in both modes, resume, the report."""
from __future__ import annotations

import pytest

from insandbox.bench.data import DataError, load_rows, parse_input_files
from tests.bench.rows import dev_rows


@pytest.mark.shared_data
def test_data_loading(tmp_path):
    assert parse_input_files("{'a.txt': 'x'}") == {"a.txt": "x"}  # Python-literal string, as in the AA-LCR rows
    assert parse_input_files('{"a.txt": "x"}') == {"a.txt": "x"}
    rows = dev_rows("long_context")
    assert rows[0].input_files and all(isinstance(v, str) for v in rows[0].input_files.values())
    p = tmp_path / "rows.jsonl"
    p.write_text('{"id": "a", "problem_statement": "x\u2028y", "ground_truth": "1"}\n'
                 '{"id": "b", "problem_statement": "z", "ground_truth": 2}\n')
    got = load_rows(p, None, None)
    assert [r.id for r in got] == ["a", "b"] and got[0].problem_statement == "x\u2028y" and got[1].ground_truth == "2"
    assert [r.id for r in load_rows(p, None, None, ids=["b"])] == ["b"]
    with pytest.raises(DataError, match="unknown ids"):
        load_rows(p, None, None, ids=["nope"])
    p.write_text('[{"id": "a", "problem_statement": "x", "ground_truth": "1"}, '
                 '{"id": "a", "problem_statement": "y", "ground_truth": "1"}]')
    with pytest.raises(DataError, match="duplicate"):
        load_rows(p, None, None)
    with pytest.raises(DataError, match="--data"):
        load_rows(None, "daixuancheng/no-such-dataset-offline", "math")

