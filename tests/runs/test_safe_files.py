"""Reading and making folders in a run folder without following links (no engine)."""
from __future__ import annotations

import os

import pytest

from insandbox.runs.safe_files import UnsafeRunFolder, check_new_folder, new_folder, read_file


def test_a_file_is_read_only_through_real_folders_and_only_if_it_is_a_plain_file(tmp_path):
    run = tmp_path / "run"
    (run / "a/b").mkdir(parents=True)
    (run / "a/b/f.txt").write_bytes(b"data")
    (tmp_path / "host.txt").write_text("host")
    assert read_file(run, "a/b/f.txt", 10) == b"data" == read_file(run, "./a//b/f.txt", 4)

    (run / "link.txt").symlink_to(tmp_path / "host.txt")
    (run / "a/inner").symlink_to(run / "a/b")  # within the folder: not followed either
    os.mkfifo(run / "fifo")
    for rel, what in (("link.txt", "a symbolic link"), ("a/inner/f.txt", "a symbolic link"),
                      ("fifo", "a special file"), ("a/b", "a folder")):
        with pytest.raises(UnsafeRunFolder, match=what):
            read_file(run, rel, 100)
    with pytest.raises(UnsafeRunFolder, match="more than the 3 insandbox reads"):
        read_file(run, "a/b/f.txt", 3)
    with pytest.raises(UnsafeRunFolder, match="not a path inside"):
        read_file(run, "../host.txt", 100)
    with pytest.raises(FileNotFoundError):
        read_file(run, "a/missing", 100)
    (tmp_path / "alias").symlink_to(run)
    with pytest.raises(UnsafeRunFolder, match="alias is a symbolic link"):
        read_file(tmp_path / "alias", "a/b/f.txt", 100)
    assert read_file(tmp_path / "alias", "a/b/f.txt", 100, follow_root=True) == b"data"  # a path the user typed


def test_folders_are_made_without_following_links_and_a_used_one_is_refused(tmp_path):
    run, host = tmp_path / "run", tmp_path / "host"
    run.mkdir()
    host.mkdir()
    check_new_folder(run, "forks/step-1/branch-1")  # nothing there: fine, and nothing made
    assert not (run / "forks").exists()
    made = new_folder(run, "forks/step-1/branch-1")
    assert made.is_dir() and new_folder(run, "forks/step-1/branch-1") == made  # empty: usable again
    (made / "x").write_text("")
    with pytest.raises(UnsafeRunFolder, match="already exists and is not empty"):
        check_new_folder(run, "forks/step-1/branch-1")
    (run / "forks/step-1/branch-2").symlink_to(host)
    (run / "other").symlink_to(host)
    for rel in ("forks/step-1/branch-2", "other/branch-1"):
        for call in (check_new_folder, new_folder):
            with pytest.raises(UnsafeRunFolder, match="is a symbolic link"):
                call(run, rel)
    assert list(host.iterdir()) == []
