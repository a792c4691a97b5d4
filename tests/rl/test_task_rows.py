"""The released RL data's rows (daixuancheng/llm-in-sandbox-rl, instruct_pretrain) as they are, from a
save_to_disk folder built here, through each command's path: rl train, rl rollout, rl verl-data."""
from __future__ import annotations

import json

import pytest

from insandbox.core.data_source import DataError
from insandbox.rl.schema import TaskRow, read_task_rows
from tests.helpers import cli
from tests.released import released_rows, save_dataset, save_dataset_dict


def test_the_released_rows_validate_as_they_are(tmp_path):
    for folder in (save_dataset(tmp_path / "dataset"), save_dataset_dict(tmp_path / "dict")):
        rows = read_task_rows(str(folder))
        assert [r["id"] for r in rows] == ["ip-0", "ip-1", "ip-2"]
        assert rows[0]["input_files"] == {"documents/story.txt": "The owl sat still.", "documents/other.txt": "Rain."}
        assert rows[2]["input_files"] == {}
        assert [r["qa_type"] for r in rows] == ["single-choice", "multi-choice", "open"]
        assert rows[1]["ground_truth"] == "A, C" and rows[0]["domain"] == "fiction"
    assert len(read_task_rows(str(tmp_path / "dict"), limit=2)) == 2
    assert len(read_task_rows(f"{tmp_path / 'dict'}:train")) == 3


def test_other_forms_of_the_fields_are_normalised():
    row = TaskRow(id=7, problem_statement="q", ground_truth=42, qa_type="open",
                  input_files=[{"path": "a.txt", "content": "alpha"}])
    assert (row.id, row.ground_truth, row.input_files) == ("7", "42", {"a.txt": "alpha"})
    assert TaskRow(id="m", problem_statement="q", ground_truth='["C", "A"]', qa_type="multi_choice").ground_truth \
        == "A,C"
    opened = TaskRow(id="o", problem_statement="q", ground_truth=["Paris", "City of Paris"], qa_type="open")
    assert (opened.ground_truth, opened.aliases) == ("Paris", ["City of Paris"])
    assert TaskRow(id="q", problem_statement="q", ground_truth='"Paris"').ground_truth == "Paris"
    assert TaskRow(id="i", problem_statement="q", ground_truth="[1, 2]").ground_truth == "[1, 2]"  # an interval
    assert TaskRow(id="j", problem_statement="q", ground_truth="x",
                   input_files=json.dumps({"d.txt": "t"})).input_files == {"d.txt": "t"}


def test_a_bad_row_is_named_in_one_line(tmp_path):
    rows = released_rows()
    rows[1] = {**rows[1], "qa_type": "essay"}
    folder = save_dataset(tmp_path / "bad", rows)
    with pytest.raises(DataError, match=r"row 2 \(id 'ip-1'\): not a task row \(qa_type: ") as e:
        read_task_rows(str(folder))
    assert "\n" not in str(e.value)
    rows = released_rows()
    rows[2] = {**rows[2], "input_files": "not a dict"}
    with pytest.raises(DataError, match=r"row 3 \(id 'ip-2'\): not a task row \(input_files is a string"):
        read_task_rows(str(save_dataset(tmp_path / "bad-files", rows)))
    twice = save_dataset(tmp_path / "twice", released_rows() + released_rows()[:1])
    with pytest.raises(DataError, match="row 4: task id 'ip-0' appears twice"):
        read_task_rows(str(twice))


def test_rl_train_reads_a_saved_folder(tmp_path):
    from insandbox.rl.trainers.config import ConfigError, load_config
    from insandbox.rl.trainers.trl_train import read_rows

    folder = save_dataset_dict(tmp_path / "rl-data")
    config = load_config(None, {"preset": "smoke", "data": f"{folder}:train", "out": str(tmp_path / "run")})
    assert [r["id"] for r in read_rows(config)] == ["ip-0", "ip-1", "ip-2"]
    yaml_file = tmp_path / "train.yaml"
    yaml_file.write_text("preset: smoke\ndata: rl-data\nout: run\nlimit: 1\n")  # relative to the file
    assert [r["id"] for r in read_rows(load_config(yaml_file))] == ["ip-0"]
    hub = load_config(None, {"preset": "smoke", "data": "hf:daixuancheng/llm-in-sandbox-rl:instruct_pretrain:train"})
    assert hub.data == "hf:daixuancheng/llm-in-sandbox-rl:instruct_pretrain:train"  # not made a path
    yaml_file.write_text("preset: smoke\ndata: hf:daixuancheng/llm-in-sandbox-rl:instruct_pretrain\n")
    assert load_config(yaml_file).data == "hf:daixuancheng/llm-in-sandbox-rl:instruct_pretrain"
    with pytest.raises(ConfigError, match="no split 'dev' \\(it has train\\)"):
        read_rows(load_config(None, {"preset": "smoke", "data": f"{folder}:dev"}))


def test_rl_verl_data_writes_parquet_from_a_saved_folder(tmp_path):
    import pyarrow.parquet as pq

    folder = save_dataset_dict(tmp_path / "rl-data")
    out = tmp_path / "verl"
    r = cli("rl", "verl-data", "--data", str(folder), "--out", str(out), "--val-size", "1")
    assert r.returncode == 0, r.stderr
    train, val = pq.read_table(out / "train.parquet").to_pylist(), pq.read_table(out / "val.parquet").to_pylist()
    assert len(train) == 2 and len(val) == 1
    tasks = {json.loads(row["insandbox_task"])["id"]: json.loads(row["insandbox_task"]) for row in train + val}
    assert tasks["ip-0"]["input_files"] == {"documents/story.txt": "The owl sat still.", "documents/other.txt": "Rain."}
    bad = cli("rl", "verl-data", "--data", f"{folder}:test", "--out", str(tmp_path / "no"))
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
    assert "no split 'test' (it has train)" in bad.stderr and not (tmp_path / "no").exists()


def test_rl_rollout_and_train_refuse_unusable_data_in_one_line(tmp_path):
    env = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    for args in (("rl", "rollout", "--out", str(tmp_path / "o")),
                 ("rl", "train", "--preset", "smoke", "--out", str(tmp_path / "o"))):
        r = cli(*args, "--data", "hf:insandbox-tests/no-such-dataset:x:train", env=env)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, r.stderr
        assert "hf:insandbox-tests/no-such-dataset:x:train: cannot load it from the Hugging Face hub" in lines[0]
        r = cli(*args, "--data", str(tmp_path))
        assert r.returncode == 2 and "not one written by datasets' save_to_disk" in r.stderr
    assert not (tmp_path / "o").exists()
