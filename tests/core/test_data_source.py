"""core/data_source.py: one string names the rows (file, save_to_disk folder, hub); errors in one line."""
from __future__ import annotations

import importlib
import json

import pytest

from insandbox.core.data_source import DataError, input_files_dict, load_records, parse_source
from tests.released import RELEASED_COLUMNS, released_rows, save_dataset, save_dataset_dict


def test_the_string_says_where_the_rows_are(tmp_path):
    assert parse_source("hf:daixuancheng/llm-in-sandbox-rl:instruct_pretrain:train") == parse_source(
        "hf:daixuancheng/llm-in-sandbox-rl:instruct_pretrain:train")
    hub = parse_source("hf:daixuancheng/llm-in-sandbox-rl:instruct_pretrain:train")
    assert (hub.kind, hub.name, hub.config, hub.split) == ("hub", "daixuancheng/llm-in-sandbox-rl",
                                                           "instruct_pretrain", "train")
    assert parse_source("hf:org/name").config is None and parse_source("hf:org/name::test").split == "test"
    assert parse_source("hf:org/name::test").describe() == "hf:org/name::test"
    with pytest.raises(DataError, match="hf:NAME"):
        parse_source("hf:")
    folder = save_dataset_dict(tmp_path / "saved")
    assert parse_source(str(folder)).kind == "disk"
    with_split = parse_source(f"{folder}:train")
    assert (with_split.kind, with_split.name, with_split.split) == ("disk", str(folder), "train")
    assert parse_source(str(tmp_path / "rows.jsonl")).kind == "file"


def test_saved_folders_load_with_their_columns_as_they_are(tmp_path):
    one = load_records(str(save_dataset(tmp_path / "one")))
    assert one == released_rows() and list(one[0]) == RELEASED_COLUMNS
    two = save_dataset_dict(tmp_path / "two", {"train": released_rows(), "test": released_rows()[:1]})
    assert len(load_records(str(two))) == 3  # train preferred
    assert len(load_records(str(two), prefer=("test",))) == 1
    assert len(load_records(f"{two}:test")) == 1
    only = save_dataset_dict(tmp_path / "only", {"validation": released_rows()[:2]})
    assert len(load_records(str(only), prefer=("test",))) == 2  # the only split


def test_split_errors_name_the_splits_there_are(tmp_path):
    two = save_dataset_dict(tmp_path / "two", {"dev": released_rows(), "eval": released_rows()})
    with pytest.raises(DataError, match=r"no split 'nope' \(it has dev, eval\)"):
        load_records(f"{two}:nope")
    with pytest.raises(DataError, match=r"name a split with :SPLIT \(it has dev, eval\)"):
        load_records(str(two))
    one = save_dataset(tmp_path / "one")
    with pytest.raises(DataError, match="holds one Dataset"):
        load_records(f"{one}:train")


def test_missing_and_unusable_places_are_one_line(tmp_path):
    for text, expected in ((str(tmp_path / "none.jsonl"), "no such file"),
                           (str(tmp_path / "gone") + "/", "no such file"),
                           (str(tmp_path), "not one written by datasets' save_to_disk")):
        with pytest.raises(DataError, match=expected) as e:
            load_records(text)
        assert "\n" not in str(e.value)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n{not json\n')
    with pytest.raises(DataError, match=r"bad.jsonl:2: not JSONL"):
        load_records(str(bad))


def test_an_unreachable_hub_name_is_one_line(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # datasets and huggingface_hub read these when first imported (an earlier test may have): without
    # the constants too, the hub is tried over the network and the test waits ~45 s for it to fail
    for module in ("datasets.config", "huggingface_hub.constants"):
        constants = importlib.import_module(module)
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
            if hasattr(constants, name):
                monkeypatch.setattr(constants, name, True)
    for text in ("hf:insandbox-tests/no-such-dataset:cfg:train", "hf:insandbox-tests/no-such-dataset"):
        with pytest.raises(DataError) as e:
            load_records(text)
        message = str(e.value)
        assert "\n" not in message and message.startswith(text.rstrip(":"))
        assert "cannot load it from the Hugging Face hub" in message and "--data" in message


def test_without_datasets_the_error_names_the_extra(tmp_path, monkeypatch):
    import builtins

    folder = save_dataset(tmp_path / "one")
    real_import = builtins.__import__

    def no_datasets(name, *args, **kwargs):
        if name == "datasets":
            raise ImportError("no datasets")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_datasets)
    with pytest.raises(DataError, match=r"rl train needs datasets, from insandbox's rl extra: "
                                        r"pip install 'insandbox\[rl\]'"):
        load_records(str(folder), command="rl train")


def test_json_and_parquet_files(tmp_path):
    rows = released_rows()
    (tmp_path / "rows.json").write_text(json.dumps({"data": rows}))
    assert load_records(str(tmp_path / "rows.json")) == rows
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rows.parquet")
    assert load_records(str(tmp_path / "rows.parquet")) == rows


def test_input_files_in_each_released_form():
    files = {"documents/a.txt": "alpha", "b.csv": "x,y"}
    assert input_files_dict(files) == files
    assert input_files_dict(json.dumps(files)) == files
    assert input_files_dict(repr(files)) == files  # a Python literal
    assert input_files_dict([{"path": "documents/a.txt", "content": "alpha"}, {"path": "b.csv", "content": "x,y"}]) \
        == files
    assert input_files_dict(json.dumps([{"path": "documents/a.txt", "content": "alpha"}])) == {
        "documents/a.txt": "alpha"}
    assert input_files_dict({"a.txt": "alpha", "b.txt": None}) == {"a.txt": "alpha"}  # arrow's merged struct
    for empty in (None, "", "{}", "[]", {}, []):
        assert input_files_dict(empty) == {}
    with pytest.raises(DataError, match="row r1: input_files is a string"):
        input_files_dict("just text", "r1")
    with pytest.raises(DataError, match="needs a path and a content"):
        input_files_dict([{"content": "no path"}])
