"""`insandbox rl build-data` end to end: outputs, the summary, and one-line errors with exit 2."""
from __future__ import annotations

import json

from tests.helpers import cli
from tests.rl.data import tiny


def test_build_data_writes_jsonl_dataset_and_manifest(tmp_path):
    folders = [str(p) for p in tiny.all_sources(tmp_path / "src")]
    (tmp_path / "src" / "README.md").write_text("a glob over the folder matches this too")
    out = tmp_path / "out"
    r = cli("rl", "build-data", "--sources", *folders, str(tmp_path / "src" / "README.md"), "--out", str(out),
            "--seed", "5", "--per-source", "4", "--examples", "1", "--distractors", "1-3",
            "--qa-types", "open,single-choice")
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == f"insandbox: skipping {tmp_path / 'src' / 'README.md'}: not a folder"
    rows = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["tasks"] == len(rows) and f"wrote {len(rows)} tasks to {out}" in r.stdout
    assert manifest["settings"] | {"seed": 5} == manifest["settings"] and manifest["settings"]["examples"] == 1
    assert manifest["settings"]["distractors"] == [1, 3] and manifest["settings"]["qa_types"] == ["open",
                                                                                                  "single-choice"]
    assert {r["qa_type"] for r in rows} <= {"open", "single-choice"} and len(rows) <= 8 * 4
    assert all(len(r["example_ids"]) <= 1 for r in rows)
    assert (out / "dataset" / "dataset_info.json").is_file()
    for name in manifest["counts"]["by_source"]:
        assert name in r.stdout

    again = cli("rl", "build-data", "--sources", *folders, "--out", str(out), "--seed", "5")
    assert again.returncode == 2 and "already holds tasks.jsonl" in again.stderr and "--force" in again.stderr
    forced = cli("rl", "build-data", "--sources", *folders, "--out", str(out), "--seed", "5", "--force")
    assert forced.returncode == 0, forced.stderr


def _one_line_error(r) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("insandbox: "), r.stderr
    return lines[0]


def test_a_folder_of_no_known_source_is_a_one_line_error(tmp_path):
    good = tiny.qed(tmp_path / "src")
    odd = tmp_path / "src" / "my-data"
    odd.mkdir()
    (odd / "notes.csv").write_text("a,b\n")
    out = tmp_path / "out"
    line = _one_line_error(cli("rl", "build-data", "--sources", str(good), str(odd), "--out", str(out)))
    assert f"source folder {odd} is not laid out like any known source" in line
    assert not out.exists()  # nothing written


def test_other_bad_arguments_exit_2(tmp_path):
    good = str(tiny.qed(tmp_path / "src"))
    out = str(tmp_path / "out")
    assert "does not exist" in _one_line_error(cli("rl", "build-data", "--sources", str(tmp_path / "nope"),
                                                   "--out", out))
    assert "MIN <= MAX" in _one_line_error(cli("rl", "build-data", "--sources", good, "--out", out,
                                               "--distractors", "5-2"))
    assert "MIN-MAX" in _one_line_error(cli("rl", "build-data", "--sources", good, "--out", out,
                                            "--distractors", "many"))
    assert "essay" in _one_line_error(cli("rl", "build-data", "--sources", good, "--out", out, "--qa-types", "essay"))
    assert "no tasks" in _one_line_error(cli("rl", "build-data", "--sources", good, "--out", out, "--qa-types",
                                             "multi-choice"))  # QED has open questions only
    second = str(tiny.qed(tmp_path / "again"))
    assert "two source folders are qed" in _one_line_error(cli("rl", "build-data", "--sources", good, second,
                                                               "--out", out))
    assert not (tmp_path / "out").exists()


def test_sources_may_be_the_folder_that_holds_them(tmp_path):
    root = tmp_path / "rl_sources"
    folders = tiny.all_sources(root)
    (root / "SOURCES.md").write_text("where each source came from")
    (root / "notes").mkdir()
    (root / "notes" / "todo.txt").write_text("not a source")
    one_by_one, together = tmp_path / "one-by-one", tmp_path / "together"
    r = cli("rl", "build-data", "--sources", *map(str, folders), "--out", str(one_by_one), "--per-source", "3")
    assert r.returncode == 0, r.stderr
    r = cli("rl", "build-data", "--sources", str(root), "--out", str(together), "--per-source", "3")
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == f"insandbox: skipping {root / 'notes'}: not a known source"
    assert (together / "tasks.jsonl").read_bytes() == (one_by_one / "tasks.jsonl").read_bytes()
    manifest = json.loads((together / "manifest.json").read_text())
    assert sorted(manifest["counts"]["by_source"]) == sorted(tiny.ALL)
    assert manifest["inputs"] == json.loads((one_by_one / "manifest.json").read_text())["inputs"]


def test_a_folder_holding_no_source_is_still_a_one_line_error(tmp_path):
    root = tmp_path / "empty-sources"
    (root / "notes").mkdir(parents=True)
    line = _one_line_error(cli("rl", "build-data", "--sources", str(root), "--out", str(tmp_path / "out")))
    assert f"source folder {root} is not laid out like any known source" in line
    both = tmp_path / "both"
    tiny.qed(both)
    tiny.qed(tmp_path / "again")
    line = _one_line_error(cli("rl", "build-data", "--sources", str(both), str(tmp_path / "again" / "qed"),
                               "--out", str(tmp_path / "out")))
    assert "two source folders are qed" in line
