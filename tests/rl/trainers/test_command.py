"""`insandbox rl train` and `insandbox rl export` on bad input: one line on stderr, exit 2, nothing made."""
from __future__ import annotations

from tests.helpers import cli


def one_line_error(r, text: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("insandbox: ") and text in lines[0], r.stderr


def test_train_needs_a_config_or_a_preset():
    one_line_error(cli("rl", "train"), "give a CONFIG.yaml or --preset NAME (paper, smoke)")


def test_train_rejects_bad_configs_in_one_line(tmp_path):
    one_line_error(cli("rl", "train", str(tmp_path / "none.yaml")), "no such config file")
    bad = tmp_path / "bad.yaml"
    bad.write_text("preset: smoke\ngrpo: {learning_rate: 1e-6\n")
    one_line_error(cli("rl", "train", str(bad)), "not valid YAML (line 3")
    bad.write_text("preset: smoke\nout: run\ngrpo:\n  lr: 1.0e-6\nrollout:\n  turns: 3\n")
    one_line_error(cli("rl", "train", str(bad)), "grpo.lr: unknown setting; rollout.turns: unknown setting")
    one_line_error(cli("rl", "train", "--preset", "tiny"), "preset 'tiny': no such preset (built in: paper, smoke)")
    assert not (tmp_path / "run").exists()


def test_train_checks_its_inputs_before_loading_anything(tmp_path):
    one_line_error(cli("rl", "train", "--preset", "smoke"), "no output folder: pass --out DIR")
    out = tmp_path / "run"
    one_line_error(cli("rl", "train", "--preset", "smoke", "--out", str(out), "--data", str(tmp_path / "x.jsonl")),
                   "x.jsonl: no such file")
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "a", "problem_statement": "q", "ground_truth": "B", "qa_type": "yes-no"}\n')
    one_line_error(cli("rl", "train", "--preset", "smoke", "--out", str(out), "--data", str(rows)),
                   "row 1 (id 'a'): not a task row (qa_type")
    rows.write_text('{"id": "a", "problem_statement": "q", "ground_truth": "B"}\n' * 2)
    one_line_error(cli("rl", "train", "--preset", "smoke", "--out", str(out), "--data", str(rows)),
                   "task id 'a' appears twice")
    assert not out.exists()


def test_export_rejects_what_is_not_a_checkpoint(tmp_path):
    one_line_error(cli("rl", "export", str(tmp_path), "--out", str(tmp_path / "m.gguf")),
                   "not a transformers checkpoint (no config.json)")
    (tmp_path / "config.json").write_text("{}")
    one_line_error(cli("rl", "export", str(tmp_path), "--out", str(tmp_path / "m.gguf"), "--outtype", "q4"),
                   "--outtype q4: one of f32, f16, bf16, q8_0")
    assert not (tmp_path / "m.gguf").exists()
