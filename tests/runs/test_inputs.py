"""What a run records of its input files, and how a replay finds them again (no engine needed)."""
from __future__ import annotations

import pytest

from insandbox.runs.inputs import InputsMissing, find_inputs, input_digests, save_input_files


def test_digests_cover_the_folder_and_the_in_memory_files_which_win(tmp_path):
    (tmp_path / "in/sub").mkdir(parents=True)
    (tmp_path / "in/sub/a.txt").write_text("folder")
    (tmp_path / "in/b.txt").write_text("folder")
    d = input_digests(tmp_path / "in", {"b.txt": "memory", "c.bin": b"\x00"})
    assert sorted(d) == ["b.txt", "c.bin", "sub/a.txt"]
    assert d["b.txt"] == input_digests(None, {"x": "memory"})["x"] != input_digests(tmp_path / "in", {})["b.txt"]


def test_in_memory_files_are_kept_in_the_run_folder_but_never_outside_it(tmp_path):
    refused = save_input_files(tmp_path, {"docs/a.txt": "A", "../escape.txt": "E", "/abs.txt": "B"})
    assert refused == ["../escape.txt"]
    assert (tmp_path / "inputs/docs/a.txt").read_text() == "A" and (tmp_path / "inputs/abs.txt").read_text() == "B"
    assert not (tmp_path.parent / "escape.txt").exists()


def test_a_replay_finds_the_inputs_checks_them_and_says_what_is_missing(tmp_path):
    save_input_files(tmp_path, {"a.txt": "A"})
    task = {"input_files": ["a.txt"], "input_dir": None, "input_digests": input_digests(None, {"a.txt": "A"})}
    found = find_inputs(task, tmp_path)
    assert found.files == {"a.txt": b"A"} and found.matches is True and found.notes == []

    (tmp_path / "inputs/a.txt").write_text("changed")
    found = find_inputs(task, tmp_path)
    assert found.matches is False and found.notes == ["the input files differ from the recorded ones: a.txt"]

    old_run = {"input_files": ["a.txt"]}  # recorded before digests existed
    found = find_inputs(old_run, tmp_path)
    assert found.files == {"a.txt": b"changed"} and found.matches is None and "no digests" in found.notes[0]

    # a host folder the run names is never read on its word, existing or not: --input-dir says which
    for named in (str(tmp_path / "inputs"), "/gone"):
        with pytest.raises(InputsMissing, match=f"host folder {named}, which a replay never reads.*--input-dir"):
            find_inputs({"input_files": [], "input_dir": named}, tmp_path)
    found = find_inputs({"input_dir": "/gone"}, tmp_path, override=tmp_path / "inputs")
    assert found.input_dir == tmp_path / "inputs"
    with pytest.raises(InputsMissing, match=r"in-memory input files \(b.txt\) are not in"):
        find_inputs({"input_files": ["b.txt"]}, tmp_path)
    with pytest.raises(InputsMissing, match="not a folder"):
        find_inputs({"input_files": ["b.txt"]}, tmp_path, override=tmp_path / "nope")
