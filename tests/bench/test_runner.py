"""Benchmarks: scorers on the dev sets, each task end to end in both modes, resume, the report."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from insandbox.bench.data import Row
from insandbox.bench.runner import BenchConfig, run_bench
from insandbox.config import RunConfig
from tests.bench.rows import TASKS, dev_rows, gold_file, gold_reply, wrong_answer
from tests.helpers import cli, containers_with_label


def _write_rows(path: Path, rows) -> Path:
    """The rows as a --data JSONL file (id, problem statement, ground truth)."""
    path.write_text("".join(json.dumps({"id": r.id, "problem_statement": r.problem_statement,
                                        "ground_truth": r.ground_truth}) + "\n" for r in rows))
    return path


def _bench_script(task: str, rows) -> dict:
    """A scripted model that answers the first row right and the second wrong, in both modes."""
    scripts = []
    for i, row in enumerate(rows):
        answer = gold_file(task, row) if i == 0 else wrong_answer(task, row)
        reply = gold_reply(task, row) if i == 0 else wrong_answer(task, row)
        turns = [{"tool": "execute_bash", "args": {"command": "ls /testbed/documents | wc -l"}}] \
            if task == "long_context" else []
        turns += [{"tool": "str_replace_editor",
                   "args": {"command": "create", "path": "/testbed/answer.txt", "file_text": answer}},
                  {"tool": "submit"}]
        scripts.append({"match": row.problem_statement, "turns": turns, "llm_turns": [{"content": reply}]})
    return {"scripts": scripts}


@pytest.mark.shared_data
@pytest.mark.parametrize("task", TASKS)
def test_each_task_end_to_end_in_both_modes(task, scripted, run_async, tmp_path, docker_image):
    rows = dev_rows(task)
    if task == "instruct_follow":
        rows = [r for r in rows if r.id in ("ifbench_0", "ifbench_42")]
    rows = rows[:2]
    srv = scripted(_bench_script(task, rows))
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": r.id, "problem_statement": r.problem_statement,
                                        "ground_truth": r.ground_truth, "input_files": r.input_files}) + "\n"
                            for r in rows))
    cfg = BenchConfig(task=task, data=data, mode="both", repeats=1, concurrency=4, output_dir=tmp_path / "run",
                      run=RunConfig(model="m", base_url=srv.url, image=docker_image, max_steps=5))
    result = run_async(run_bench(cfg))
    recs = {(r["id"], r["mode"]): r for r in result.records}
    assert len(recs) == 4 and not any(r["error"] for r in recs.values())
    for mode in ("sandbox", "llm"):
        assert recs[(rows[0].id, mode)]["score"] == 1.0, recs[(rows[0].id, mode)]
        assert recs[(rows[1].id, mode)]["score"] == 0.0
        assert result.summary["tasks"][task][mode]["accuracy"] == 0.5
    assert result.summary["tasks"][task]["sandbox_vs_llm"]["pairs"] == 2
    sb = recs[(rows[0].id, "sandbox")]
    assert sb["exit_reason"] == "submitted" and sb["steps"] >= 2 and sb["initial_prompt_tokens"] > 0
    assert (result.run_dir / sb["trajectory"]).is_file()
    assert recs[(rows[0].id, "llm")]["exit_reason"] == "completed"
    if task == "long_context":  # documents are files in sandbox mode, in the prompt in plain mode
        traj = json.loads((result.run_dir / sb["trajectory"]).read_text())
        assert traj["steps"][0]["tool_calls"][0]["output"].startswith(str(len(rows[0].input_files)))
        plain = [r for r in srv.requests if not r["tools"]]
        assert any('<document name="' in r["messages"][-1]["content"] for r in plain)
    if task in ("chem", "biomed"):  # both extractions' verdicts are in results.jsonl, for the report
        written = [json.loads(x) for x in (result.run_dir / "results.jsonl").read_text().splitlines()]
        for rec in written:
            both = rec["score_detail"]["extractions"]
            assert both["strict"]["score"] == rec["score"] and both["reference"]["score"] in (0.0, 1.0)
        assert recs[(rows[0].id, "llm")]["score_detail"]["extractions"]["reference"]["score"] == 1.0
    if task in ("physics", "long_context"):
        assert "offline approximation" in sb["score_method"] and sb["approximate"]
        assert result.summary["tasks"][task]["sandbox"]["approximate"]


@pytest.mark.shared_data
def test_repeats_and_judge_wiring(scripted, run_async, tmp_path, docker_image):
    rows = dev_rows("physics")[:2]
    script = _bench_script("physics", rows)
    script["scripts"].append({"name": "the-judge", "llm_turns": [{"content": "CORRECT"}]})
    srv = scripted(script)
    data = _write_rows(tmp_path / "rows.jsonl", rows)
    cfg = BenchConfig(task="physics", data=data, mode="sandbox", repeats=2, concurrency=4, output_dir=tmp_path / "r",
                      judge_model="the-judge", judge_base_url=srv.url,
                      run=RunConfig(model="m", base_url=srv.url, image=docker_image, max_steps=5))
    result = run_async(run_bench(cfg))
    assert len(result.records) == 4 and {r["repeat"] for r in result.records} == {0, 1}
    assert all(r["score_method"] == "LLM judge (the-judge)" and not r["approximate"] for r in result.records)
    summary = result.summary["tasks"]["physics"]["sandbox"]
    # every item right in both repeats: no spread for a t-interval, so Wilson with each item counted once
    assert summary["accuracy"] == 1.0 and summary["ci_method"] == "wilson over items" and summary["items"] == 2
    assert summary["ci95"][0] < 0.5 and summary["ci95"][1] == 1.0


@pytest.mark.shared_data
def test_resume_after_a_killed_run_repeats_nothing(scripted, tmp_path, docker_image):
    rows = dev_rows("chem")[:6]
    script = _bench_script("chem", rows[:2])
    for row in rows[2:]:
        script["scripts"].append({"match": row.problem_statement, "latency": 0.3, "turns": [
            {"tool": "execute_bash", "args": {"command": "sleep 0.3"}},
            {"tool": "str_replace_editor", "args": {"command": "create", "path": "/testbed/answer.txt",
                                                    "file_text": row.ground_truth}}, {"tool": "submit"}],
            "llm_turns": [{"content": f"Answer: {row.ground_truth}"}]})
    srv = scripted(script)
    data = _write_rows(tmp_path / "rows.jsonl", rows)
    run_dir = tmp_path / "run"
    exe = Path(sys.executable).parent / "insandbox"
    args = [str(exe), "bench", "chem", "--data", str(data), "--mode", "both", "--model", "m", "--base-url", srv.url,
            "--image", docker_image, "--concurrency", "2", "--out", str(run_dir), "-q"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = run_dir / "results.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not results.is_file() or len(results.read_text().splitlines()) < 4):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # killed half way: no chance to clean up
    proc.wait()
    done_before = {(r["id"], r["mode"]) for r in map(json.loads, results.read_text().splitlines())}
    assert 4 <= len(done_before) < 12
    cli("clean")  # the killed run's containers stopped by themselves; remove them
    t_resume = time.time()
    r = cli("bench", "--resume", str(run_dir), "-q")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    keys = [(x["id"], x["mode"]) for x in lines]
    assert len(keys) == len(set(keys)) == 12  # every sample exactly once
    restarted = set()
    by_text = {row.problem_statement: row.id for row in rows}
    for req in srv.requests:
        if req["t_recv"] >= t_resume and req["turn"] == 0:
            first_user = next(m["content"] for m in req["messages"] if m["role"] == "user")
            rid = next(i for text, i in by_text.items() if text in first_user)
            restarted.add((rid, "sandbox" if req["tools"] else "llm"))
    assert restarted and not (restarted & done_before)
    assert json.loads((run_dir / "summary.json").read_text())["samples"] == 12


@pytest.mark.shared_data
def test_infrastructure_failures_are_retried_and_kept_apart(scripted, run_async, tmp_path):
    rows = dev_rows("chem")[:3]
    srv = scripted({"scripts": [
        {"match": rows[0].problem_statement, "llm_turns": [{"content": f"Answer: {rows[0].ground_truth}",
                                                           "fail": {"status": 503, "times": 1}}]},
        {"match": rows[1].problem_statement, "llm_turns": [{"content": "x", "fail": {"status": 500, "times": 99}}]},
        {"match": rows[2].problem_statement, "llm_turns": [{"content": "Answer: Z"}]}]})
    data = _write_rows(tmp_path / "rows.jsonl", rows)
    cfg = BenchConfig(task="chem", data=data, mode="llm", retries=1, retry_backoff_s=0.05, output_dir=tmp_path / "r",
                      run=RunConfig(model="m", base_url=srv.url, max_retries=0))
    result = run_async(run_bench(cfg))
    recs = {r["id"]: r for r in result.records}
    assert recs[rows[0].id]["score"] == 1.0 and recs[rows[0].id]["attempts"] == 2  # failed once, then fine
    bad = recs[rows[1].id]
    assert bad["score"] is None and "model_error" in bad["error"] and bad["attempts"] == 2
    assert recs[rows[2].id]["score"] == 0.0 and recs[rows[2].id]["error"] is None  # wrong, not an error
    summary = result.summary["tasks"]["chem"]["llm"]
    # every sample counts: the error as wrong in `accuracy`, left out of `accuracy_scored`
    assert (summary["n"], summary["scored"], summary["errors"], summary["accuracy"], summary["accuracy_scored"]) == \
        (3, 2, 1, 1 / 3, 0.5)


@pytest.mark.shared_data
def test_resume_reruns_an_errored_sample_and_keeps_one_record_of_it(scripted, run_async, tmp_path):
    """Regression: `--resume` after an errored sample left that sample twice in results.jsonl."""
    rows = dev_rows("chem")[:2]
    srv = scripted({"scripts": [
        {"match": rows[0].problem_statement, "llm_turns": [{"content": f"Answer: {rows[0].ground_truth}",
                                                           "fail": {"status": 503, "times": 1}}]},
        {"match": rows[1].problem_statement, "llm_turns": [{"content": "Answer: Z"}]}]})
    data = _write_rows(tmp_path / "rows.jsonl", rows)
    cfg = BenchConfig(task="chem", data=data, mode="llm", retries=0, output_dir=tmp_path / "r",
                      run=RunConfig(model="m", base_url=srv.url, max_retries=0))
    first = run_async(run_bench(cfg))
    assert {r["id"]: bool(r["error"]) for r in first.records} == {rows[0].id: True, rows[1].id: False}
    run_async(run_bench(cfg, resume=tmp_path / "r"))
    lines = [json.loads(x) for x in (tmp_path / "r" / "results.jsonl").read_text().splitlines()]
    assert sorted(x["id"] for x in lines) == sorted(r.id for r in rows)  # exactly one record per sample
    again = next(x for x in lines if x["id"] == rows[0].id)
    assert again["error"] is None and again["score"] == 1.0
    assert again["attempts"] == 2 and again["resumed_attempts"] == 1  # the errored attempt is counted


def test_a_model_server_failing_every_request_stops_the_run(scripted, run_async, tmp_path):
    """Ten infrastructure failures in a row stop the run (a server that does not answer at all stops it before
    its folder exists: models/endpoint.py, tests/cli/test_failures.py)."""
    from insandbox.bench.runner import MAX_CONSECUTIVE_INFRA, BenchAborted
    from insandbox.models.endpoint import EndpointUnreachable
    from tests.servers import free_port

    srv = scripted({"faults": [{"requests": [1, 999], "status": 503}], "llm_turns": [{"content": "A"}]})
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": f"r{i}", "problem_statement": f"q{i}", "ground_truth": "A"}) + "\n"
                            for i in range(MAX_CONSECUTIVE_INFRA + 5)))
    cfg = BenchConfig(task="chem", data=data, mode="llm", retries=0, concurrency=1, output_dir=tmp_path / "r",
                      run=RunConfig(model="m", base_url=srv.url, max_retries=0))
    with pytest.raises(BenchAborted, match="in a row failed"):
        run_async(run_bench(cfg))
    lines = (tmp_path / "r" / "results.jsonl").read_text().splitlines()
    assert len(lines) == MAX_CONSECUTIVE_INFRA and all(json.loads(x)["error"] for x in lines)
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["errors"] == MAX_CONSECUTIVE_INFRA
    dead = cfg.model_copy(update={"output_dir": tmp_path / "dead", "run": RunConfig(
        model="m", base_url=f"http://127.0.0.1:{free_port()}/v1")})
    with pytest.raises(EndpointUnreachable, match="connection refused"):
        run_async(run_bench(dead))
    assert not (tmp_path / "dead").exists()


def test_resume_keeps_the_step_limit_of_the_first_session(tmp_path):
    """bench.json records the step limit the samples ran with; an older one, whose run settings hold the default
    beside a task's own limit, resumes with the task's limit as the first session did."""
    from insandbox.bench.runner import BenchRun, load_bench_config

    task = tmp_path / "task.yaml"
    task.write_text("name: t\nextends: _base\nscorer: exact\nmax_steps: 7\ninstance_prompt: '{problem_statement}'\n")
    rows = [Row("r1", "q", "a")]
    first = BenchRun(BenchConfig(task=str(task), run=RunConfig(model="m")), run_dir=tmp_path / "run")
    first.run_dir.mkdir()
    first._save_config(rows)
    meta = json.loads((first.run_dir / "bench.json").read_text())
    assert meta["max_steps"] == 7
    assert BenchRun(load_bench_config(first.run_dir), run_dir=first.run_dir).max_steps == 7
    del meta["max_steps"]  # an older bench.json
    (first.run_dir / "bench.json").write_text(json.dumps(meta))
    assert BenchRun(load_bench_config(first.run_dir), run_dir=first.run_dir).max_steps == 7
    explicit = BenchRun(BenchConfig(task=str(task), run=RunConfig(model="m", max_steps=3)), run_dir=tmp_path / "x")
    assert explicit.max_steps == 3


def test_bench_passes_the_run_options_to_every_sample(scripted, tmp_path, docker_image):
    """`bench` takes every option `run` has: the sandbox's environment, the prompts (laid over the
    task's), the output limit, the client's settings."""
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "q1", "problem_statement": "Which one?\nA. x\nB. y", "ground_truth": "B"}) + "\n")
    over = tmp_path / "prompts.yaml"
    over.write_text("system_prompt: 'SYSTEM-OVERRIDE, work in {working_dir}'\n")
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": "echo $ANSWER > /testbed/answer.txt; "
                                                                           "seq 1000"}},
                              {"tool": "submit"}]})
    run_dir = tmp_path / "run"
    r = cli("bench", "chem", "--data", str(data), "--model", "m", "--base-url", srv.url, "--image", docker_image,
            "--env", "ANSWER=B", "--prompt-config", str(over), "--output-limit", "300", "--max-retries", "0",
            "--tool-choice", "required", "--out", str(run_dir), "-q")
    assert r.returncode == 0, r.stderr
    rec = json.loads((run_dir / "results.jsonl").read_text())
    assert rec["score"] == 1.0 and rec["answer"] == "B\n"
    first = srv.requests[0]
    assert first["messages"][0]["content"] == "SYSTEM-OVERRIDE, work in /testbed"
    assert "Write only the letter" in first["messages"][1]["content"]  # the task's own instance prompt
    assert first["params"]["tool_choice"] == "required"
    observed = srv.requests[1]["messages"][3]["content"]
    assert "characters cut from the middle" in observed and len(observed) < 1000
    summary = json.loads((run_dir / "summary.json").read_text())  # the model called its tools: nothing to warn of
    assert summary["tasks"]["chem"]["sandbox"]["no_tool_call"] == 0 and summary["warnings"] == []


@pytest.mark.parametrize("tool_format", ["native", "text"])
def test_sandbox_samples_without_a_tool_call_are_counted_and_most_of_them_warned_of(tool_format, scripted, tmp_path,
                                                                                    docker_image):
    """Regression: against a server whose chat template drops the tools every sandbox sample made no tool
    call, and nothing on the console, in summary.json or in the report said so. Now each says how many,
    per task and mode, and warns (with advice for the tool format) when it is most of them; the run warns
    as soon as it is clear."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": f"q{i}", "problem_statement": f"q{i} Which one?\nA. x\nB. y",
                                        "ground_truth": "A"}) + "\n" for i in range(5)))
    words = [{"content": "The answer is A."}] * 3  # never a call; text mode plays llm_turns (no tools are sent)
    srv = scripted({"turns": words, "llm_turns": words})
    run_dir = tmp_path / "run"
    r = cli("bench", "chem", "--data", str(rows), "--mode", "both", "--model", "m", "--base-url", srv.url,
            "--image", docker_image, "--max-steps", "2", "--tool-format", tool_format, "--concurrency", "4",
            "--out", str(run_dir))
    assert r.returncode == 0, r.stderr[-2000:]
    out = " ".join(r.stdout.split())  # the console wraps long lines
    assert "warning: chem: 5 of the first 5 sandbox-mode samples made no tool call" in out  # during the run
    final = ("warning: chem: 5 of 5 sandbox-mode samples made no tool call, so the sandbox-mode score measures "
             "the model without its tools.")
    assert final in out
    advice = "no <tool_call> block was found" if tool_format == "text" else "try --tool-format text"
    assert advice in out.split(final)[1]

    summary = json.loads((run_dir / "summary.json").read_text())
    sandbox, plain = summary["tasks"]["chem"]["sandbox"], summary["tasks"]["chem"]["llm"]
    assert (sandbox["no_tool_call"], sandbox["no_tool_call_of"], sandbox["no_tool_call_share"]) == (5, 5, 1.0)
    assert "no_tool_call" not in plain  # plain mode has no tools to call
    assert len(summary["warnings"]) == 1 and summary["warnings"][0].startswith("chem: 5 of 5 sandbox-mode")
    assert advice in summary["warnings"][0]

    r = cli("report", str(run_dir), "--no-plots")
    assert r.returncode == 0, r.stderr[-2000:]
    assert final in " ".join(r.stdout.split())
    md = (run_dir / "report" / "report.md").read_text()
    assert "> **Warning:** chem: 5 of 5 sandbox-mode samples made no tool call" in md
    assert "| errors | scored accuracy | unscored | no tool call | scoring |" in md
    sandbox_row = next(line for line in md.splitlines() if line.startswith("| m | chem | sandbox |"))
    plain_row = next(line for line in md.splitlines() if line.startswith("| m | chem | llm |"))
    assert "| 5 of 5 |" in sandbox_row and "| - |" in plain_row
    html = (run_dir / "report" / "report.html").read_text()
    assert '<p class="warning"><strong>Warning:</strong> chem: 5 of 5 sandbox-mode samples' in html
    assert ">5 of 5</td>" in html


def _choice_rows(path: Path) -> Path:
    path.write_text("".join(json.dumps({"id": f"r{i}", "problem_statement": f"q{i} Which one?\nA. x\nB. y",
                                        "ground_truth": gt}) + "\n" for i, gt in ((1, "A"), (2, "B"))))
    return path


class _Statuses:
    def __init__(self):
        self.said = []

    def __getattr__(self, name):
        return lambda *a, **k: None

    def on_status(self, text):
        self.said.append(text)


def test_bench_records_the_cost_of_each_sample_of_each_mode_and_in_all(scripted, run_async, tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("INSANDBOX_PRICES", raising=False)
    prices = tmp_path / "prices.yaml"
    prices.write_text("prices:\n  bench-model: {input: 1, cache_read: 0.25, output: 4}\n")
    srv = scripted({"scripts": [
        {"match": "q1", "llm_turns": [{"content": "Answer: A", "usage": {
            "prompt_tokens": 2000, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 1000}}}]},
        {"match": "q2", "llm_turns": [{"content": "Answer: A", "usage": {"prompt_tokens": 1000,
                                                                        "completion_tokens": 500}}]}]})
    cfg = BenchConfig(task="chem", data=_choice_rows(tmp_path / "rows.jsonl"), mode="llm",
                      output_dir=tmp_path / "run", run=RunConfig(model="bench-model", base_url=srv.url, prices=prices))
    result = run_async(run_bench(cfg))
    r1, r2 = (1000 * 1 + 1000 * 0.25 + 100 * 4) / 1e6, (1000 * 1 + 500 * 4) / 1e6  # r1 right, r2 wrong
    assert {r["id"]: r["cost_usd"] for r in result.records} == {"r1": pytest.approx(r1), "r2": pytest.approx(r2)}
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    llm = summary["tasks"]["chem"]["llm"]
    assert llm["cost_usd"] == pytest.approx(r1 + r2) and llm["cost_per_sample_usd"] == pytest.approx((r1 + r2) / 2)
    assert llm["cost_per_correct_usd"] == pytest.approx(r1 + r2) and llm["cost_unknown"] == 0
    assert summary["cost_usd"] == pytest.approx(r1 + r2) and summary["price"]["entry"] == "bench-model"


def test_bench_with_no_price_for_its_model_says_so_once_and_records_unknown_costs(scripted, run_async, tmp_path,
                                                                                   monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setattr("insandbox.runs.session.is_local", lambda url: False)  # as if the server were elsewhere
    srv = scripted({"turns": [{"content": "Answer: A"}]})
    cfg = BenchConfig(task="chem", data=_choice_rows(tmp_path / "rows.jsonl"), mode="llm",
                      output_dir=tmp_path / "run", run=RunConfig(model="nobody-prices-me", base_url=srv.url))
    progress = _Statuses()
    result = run_async(run_bench(cfg, progress))
    assert [s for s in progress.said if "price" in s] == [
        "no price for 'nobody-prices-me': sample costs are recorded as unknown (add it to a price file: --prices "
        "FILE)"]
    assert [r["cost_usd"] for r in result.records] == [None, None]  # unknown, not $0
    llm = result.summary["tasks"]["chem"]["llm"]
    assert (llm["cost_usd"], llm["cost_unknown"], result.summary["cost_usd"]) == (None, 2, None)
    assert result.summary["price"]["match"] == "unknown"


def test_what_failed_attempts_cost_is_kept_with_the_sample(scripted, run_async, tmp_path, monkeypatch,
                                                           docker_image):
    """The first attempt pays for a step, then its model server fails; the retry succeeds."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    prices = tmp_path / "prices.yaml"
    prices.write_text("prices:\n  bench-model: {input: 1, output: 4}\n")
    srv = scripted({"turns": [
        {"tool": "execute_bash", "args": {"command": "echo A > /testbed/answer.txt"},
         "usage": {"prompt_tokens": 1000, "completion_tokens": 100}},
        {"tool": "submit", "fail": {"status": 500, "times": 1}, "usage": {"prompt_tokens": 2000,
                                                                          "completion_tokens": 50}}]})
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "r1", "problem_statement": "Which?\nA. x\nB. y", "ground_truth": "A"}) + "\n")
    cfg = BenchConfig(task="chem", data=data, retries=1, retry_backoff_s=0.05, output_dir=tmp_path / "run",
                      run=RunConfig(model="bench-model", base_url=srv.url, prices=prices, max_retries=0,
                                    image=docker_image))
    (record,) = run_async(run_bench(cfg)).records
    first, second = 1400 / 1e6, (1400 + 2200) / 1e6
    assert record["attempts"] == 2 and record["score"] == 1.0
    assert record["cost_usd"] == pytest.approx(second) and record["retry_cost_usd"] == pytest.approx(first)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["cost_usd"] == pytest.approx(first + second)


def test_bench_samples_share_recycled_sandboxes_without_seeing_each_other(scripted, run_async, tmp_path,
                                                                         docker_image):
    """The default pool recycles containers between samples: each sample lists what it finds, then
    leaves files, a process and a package behind; every later sample must find the image's state."""
    task = tmp_path / "probe.yaml"
    task.write_text("name: probe\nextends: _base\nscorer: exact\ninstance_prompt: |-\n  {problem_statement}\n")
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{i}", "problem_statement": f"probe {i}",
                                        "ground_truth": "documents input output | 0 | none"}) + "\n" for i in range(6)))
    look = ("echo $(ls -A /testbed) \\| $(pgrep -c sleep) \\| $(ls /usr/local/lib/python3*/dist-packages | "
            "grep -c leftover || true) > /testbed/answer.txt; sed -i 's/| 0$/| none/' /testbed/answer.txt")
    leave = ("mkdir -p /usr/local/lib/python3.11/dist-packages/leftover; touch /testbed/leftover /tmp/leftover; "
             "nohup sleep 600 >/dev/null 2>&1 &")
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": look}},
                              {"tool": "execute_bash", "args": {"command": leave}}, {"tool": "submit"}]})
    cfg = BenchConfig(task=str(task), data=data, concurrency=2, output_dir=tmp_path / "r",
                      run=RunConfig(model="m", base_url=srv.url, image=docker_image, max_steps=5))
    result = run_async(run_bench(cfg))
    assert [r["score"] for r in result.records] == [1.0] * 6, [r.get("answer") for r in result.records]
    uses = [json.loads((tmp_path / "r" / r["trajectory"]).read_text())["sandbox"].get("uses", 1)
            for r in result.records]
    assert max(uses) >= 2, uses  # containers really were shared
    pool = result.summary["session"]["sandbox_pool"]
    assert pool["recycled"] >= 1 and pool["started"] < 6
    assert containers_with_label(f"insandbox.run_id={pool_run_id(result)}") == []


def pool_run_id(result) -> str:
    """The run id the pool's containers carry (recorded in each sandbox sample's trajectory)."""
    rec = next(r for r in result.records if r["mode"] == "sandbox")
    name = json.loads((result.run_dir / rec["trajectory"]).read_text())["sandbox"]["name"]
    return name.rsplit("-", 1)[0].removeprefix("insandbox-")
