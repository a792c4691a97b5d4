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



def test_data_can_be_a_saved_datasets_folder(tmp_path):
    from insandbox.bench.runner import BenchConfig
    from tests.released import released_rows, save_dataset, save_dataset_dict

    one = save_dataset(tmp_path / "one")
    rows = load_rows(one, None, None)
    assert [r.id for r in rows] == ["ip-0", "ip-1", "ip-2"]
    assert rows[0].input_files == {"documents/story.txt": "The owl sat still.", "documents/other.txt": "Rain."}
    both = save_dataset_dict(tmp_path / "both", {"train": released_rows(), "test": released_rows()[2:]})
    assert [r.id for r in load_rows(str(both), None, None)] == ["ip-2"]  # the task's split, test
    assert [r.id for r in load_rows(f"{both}:train", None, None, limit=1)] == ["ip-0"]
    only = save_dataset_dict(tmp_path / "only")
    assert len(load_rows(str(only), None, None)) == 3  # no test split: the only one
    with pytest.raises(DataError, match=r"no split 'dev' \(it has train, test\)"):
        load_rows(f"{both}:dev", None, None)
    assert BenchConfig(task="math", data=one).data == str(one)
