"""`insandbox replay`: a recorded run's tool calls again in a fresh sandbox, compared call by call."""
from __future__ import annotations

import json
import shutil

from insandbox import arun
from insandbox.replay.replayer import replay_run
from tests.helpers import cli

DETERMINISTIC = {"turns": [
    {"tool": "execute_bash", "args": {"command": "mkdir -p /tmp/w && cd /tmp/w && export GREETING=hello && "
                                                 "cat /testbed/input/notes/a.txt"}},
    {"tool": "execute_bash", "args": {"command": "echo $GREETING from $PWD; seq 3 > n.txt; wc -l n.txt"}},
    {"tool": "str_replace_editor", "args": {"command": "create", "path": "/testbed/output/r.md", "file_text": "x\n"}},
    {"tool_calls": [{"name": "str_replace_editor", "arguments": {"command": "view", "path": "/testbed/output/r.md"}},
                    {"name": "execute_bash", "arguments": {"command": "ls /testbed/input/notes"}}]},
    {"content": "thinking, no call"},
    {"tool": "submit"}]}

NOISY = {"turns": [
    {"tool": "execute_bash", "args": {"command": "echo steady"}},
    {"tool": "execute_bash", "args": {"command": "date +%N"}},
    {"tool": "execute_bash", "args": {"command": "echo still steady"}},
    {"tool": "submit"}]}


def _record(run_async, srv, out, docker_image, **kw):
    return run_async(arun("do it", model="scripted", base_url=srv.url, output_dir=out, image=docker_image,
                          max_steps=10, **kw))


def test_a_deterministic_run_replays_identically_with_its_in_memory_inputs(scripted, run_async, tmp_path,
                                                                           docker_image):
    srv = scripted(DETERMINISTIC)
    run = tmp_path / "run"
    result = _record(run_async, srv, run, docker_image, input_files={"notes/a.txt": "alpha\n"})
    assert result.exit_reason == "submitted"
    assert (run / "inputs/notes/a.txt").read_text() == "alpha\n"  # kept for replay
    assert set(result.trajectory.task["input_digests"]) == {"notes/a.txt"}
    assert "alpha" in result.trajectory.steps[0].tool_calls[0].output

    report = run_async(replay_run(run))
    assert report.stopped is None and report.inputs_match is True
    assert (report.steps_replayed, report.calls, report.identical, report.differing) == (6, 6, 6, 0)
    assert report.first_divergence is None

    r = cli("replay", str(run), "--out", str(tmp_path / "report.json"))
    assert r.returncode == 0, r.stderr
    assert "6 identical, 0 differ; first divergence: none" in r.stdout
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["identical"] == 6 and len(saved["comparisons"]) == 6

    # the inputs changed since: the replay says so (and the cat at step 1 differs)
    (run / "inputs/notes/a.txt").write_text("beta\n")
    report = run_async(replay_run(run, until=1))
    assert report.inputs_match is False and any("differ from the recorded ones: notes/a.txt" in n
                                                for n in report.notes)
    assert report.first_divergence == {"step": 1, "call": 1, "tool": "execute_bash"}

    # the inputs are gone: a clear error, exit 2
    shutil.rmtree(run / "inputs")
    r = cli("replay", str(run))
    assert r.returncode == 2 and "in-memory input files (notes/a.txt)" in r.stderr and "--input-dir" in r.stderr
    (tmp_path / "elsewhere/notes").mkdir(parents=True)
    (tmp_path / "elsewhere/notes/a.txt").write_text("alpha\n")
    r = cli("replay", str(run), "--input-dir", str(tmp_path / "elsewhere"), "--until", "2", "-q")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "2 steps, 2 calls: 2 identical, 0 differ; first divergence: none"


def test_a_varying_command_differs_at_its_step_and_ignore_patterns_mask_it(scripted, run_async, tmp_path,
                                                                           docker_image):
    srv = scripted(NOISY)
    run = tmp_path / "run"
    _record(run_async, srv, run, docker_image)
    r = cli("replay", str(run), "--out", str(tmp_path / "report.json"))
    assert r.returncode == 0, r.stderr  # differences are findings, not failures
    assert "first divergence: step 2, call 1 (execute_bash)" in r.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert [c["status"] for c in report["comparisons"]] == ["same", "differs", "same", "same"]
    assert report["comparisons"][1]["diff"].startswith("--- recorded\n+++ replayed")

    r = cli("replay", str(run), "--ignore", "(unclosed")
    assert r.returncode == 2 and "not a regular expression" in r.stderr
    report = run_async(replay_run(run, ignore=[r"\b\d{9}\b"]))
    assert report.differing == 0 and report.ignore == [r"\b\d{9}\b"]


def test_what_cannot_be_replayed_is_a_clear_error(scripted, run_async, tmp_path, docker_image):
    r = cli("replay", str(tmp_path))
    assert r.returncode == 2 and "no trajectory.json" in r.stderr
    srv = scripted({"llm_turns": [{"content": "42"}]})
    run_async(arun("x", model="m", base_url=srv.url, output_dir=tmp_path / "llm", mode="llm"))
    r = cli("replay", str(tmp_path / "llm"))
    assert r.returncode == 2 and "llm-mode run made no tool calls" in r.stderr


def test_a_benchmark_sample_replays_with_its_documents(scripted, run_async, tmp_path, docker_image):
    from insandbox.bench.runner import BenchConfig, run_bench
    from insandbox.config import RunConfig

    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "q1", "problem_statement": "What number is in the document?",
                                "ground_truth": "7", "input_files": {"doc.txt": "seven is 7\n"}}) + "\n")
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": "grep -o '[0-9]' /testbed/input/doc.txt "
                                                                           "| tee /testbed/answer.txt"}},
                              {"tool": "submit"}]})
    cfg = BenchConfig(task="math", data=data, mode="sandbox", repeats=1, output_dir=tmp_path / "b",
                      run=RunConfig(model="m", base_url=srv.url, image=docker_image))
    run_async(run_bench(cfg))
    sample = tmp_path / "b/samples/sandbox/q1/r0"
    assert (sample / "inputs/doc.txt").read_text() == "seven is 7\n"
    report = run_async(replay_run(sample))
    assert (report.calls, report.identical, report.inputs_match, report.notes) == (2, 2, True, [])
