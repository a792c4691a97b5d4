"""`insandbox rl build-data` on all eight staged sources (../shared/data/rl_sources)."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from insandbox.rl.schema import DOMAINS, QA_TYPES, TaskRow
from tests.helpers import cli, shared_data

pytestmark = pytest.mark.shared_data

SOURCES = ["aqua", "fairytaleqa", "logiqa", "mctest", "qed", "race", "tweeteval", "wikitablequestions"]


def _folders() -> list[str]:
    return [str(shared_data() / "rl_sources" / name) for name in SOURCES]


def test_full_build_of_every_staged_source(tmp_path):
    out = tmp_path / "tasks"
    r = cli("rl", "build-data", "--sources", *_folders(), "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (out / "tasks.jsonl").read_text(encoding="utf-8").splitlines()]
    manifest = json.loads((out / "manifest.json").read_text())
    counts = manifest["counts"]
    assert counts["tasks"] == len(rows) > 15_000
    assert counts["by_source"] == dict(sorted(Counter(r["source"] for r in rows).items()))
    assert list(counts["by_source"]) == SOURCES and set(counts["by_domain"]) == set(DOMAINS)
    assert set(counts["by_qa_type"]) == set(QA_TYPES)
    assert counts["by_source_and_qa_type"]["race"].keys() == {"single-choice", "multi-choice"}
    assert counts["by_source_and_qa_type"]["tweeteval"].keys() == {"single-choice", "multi-choice", "open"}
    assert manifest["sources"]["qed"]["skipped"]["no supported answer (explanation_type none)"] == 151
    assert all(s["fewer_distractors"] == 0 for s in manifest["sources"].values())
    assert manifest["inputs"] == [str(Path(f).resolve()) for f in _folders()]  # recorded resolved (symlinks too)
    for row in rows[::97]:
        TaskRow(**row)
        assert 1 <= len(row["input_files"]) and all(len(t) <= 20_000 for t in row["input_files"].values())
    assert len({r["id"] for r in rows}) == len(rows)


def test_staged_builds_are_deterministic_for_a_seed(tmp_path):
    def jsonl(seed: str, name: str) -> bytes:
        r = cli("rl", "build-data", "--sources", *_folders(), "--out", str(tmp_path / name), "--seed", seed,
                "--limit", "150")
        assert r.returncode == 0, r.stderr
        return (tmp_path / name / "tasks.jsonl").read_bytes()

    first = jsonl("11", "a")
    assert jsonl("11", "b") == first
    assert jsonl("12", "c") != first


def test_the_staged_folder_itself_as_sources(tmp_path):
    out = tmp_path / "tasks"
    r = cli("rl", "build-data", "--sources", str(shared_data() / "rl_sources"), "--out", str(out), "--per-source", "5",
            "--examples", "0")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert list(manifest["counts"]["by_source"]) == SOURCES
    assert manifest["inputs"] == [str(Path(f).resolve()) for f in _folders()]
