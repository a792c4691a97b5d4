"""Benchmarks: scorers on the dev sets, each task end to end in both modes, resume, the report."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SHARED_DATA, cli

from insandbox.bench.data import DataError, load_rows, parse_input_files
from insandbox.bench.report import write_report
from insandbox.bench.runner import BenchConfig, run_bench
from insandbox.bench.scorers import make_scorer
from insandbox.bench.scorers.choice import extract_choice
from insandbox.bench.scorers.judge import Judge
from insandbox.bench.tasks import builtin_tasks, load_task
from insandbox.config import RunConfig
from insandbox.models import OpenAIChatClient

TASKS = ["math", "physics", "chem", "biomed", "long_context", "instruct_follow"]
REPORT_RUN = Path(__file__).parent / "data" / "report_run"

# IFBench has no reference responses: these are written to satisfy their rows' constraints
IF_GOLD = {
    "ifbench_0": "A kaleidoscope of thought. " + "The nebula glows. " * 2 + "A whisper. " * 3
                 + "Into the labyrinth. " * 5 + "A paradox. " * 7,
    "ifbench_42": " ".join(["word"] * 59),
    "ifbench_6": "Ideas matter, and plans matter, but action matters most.",
    "ifbench_70": "Light is fast 🚀. Nothing with mass reaches it 🌌. Time slows near it ⏳.",
}


def dev_rows(task: str):
    return load_rows(SHARED_DATA / "bench" / task / "dev.jsonl", None, None)


def gold_file(task: str, row) -> str:
    """What a model that knows the answer writes to answer.txt."""
    if task == "math":
        return "\\boxed{" + row.ground_truth + "}"
    if task == "instruct_follow":
        return IF_GOLD[row.id]
    return row.ground_truth


def gold_reply(task: str, row) -> str:
    """The same, as a plain-mode reply."""
    if task in ("math", "physics"):
        return "Working through it step by step, the result is " + gold_file(task, row) + "."
    if task in ("chem", "biomed"):
        return f"The options point one way.\nAnswer: {row.ground_truth}"
    return gold_file(task, row)


def wrong_answer(task: str, row) -> str:
    return {"math": "\\boxed{123456789}", "physics": "\\boxed{\\text{no idea}}",
            "chem": "Z", "biomed": "Z", "long_context": "xyzzy plugh",
            "instruct_follow": "no"}[task]


@pytest.mark.parametrize("task", [t for t in TASKS if t != "instruct_follow"])
def test_gold_answers_get_full_marks_on_every_dev_row(task, run_async):
    spec = load_task(task)
    scorer = make_scorer(spec.scorer, spec.offline_scorer)

    async def body():
        for row in dev_rows(task):
            for answer in (gold_file(task, row), gold_reply(task, row)):
                result = await scorer.score(answer, row)
                assert result.score == 1.0, (row.id, answer[:80], result)
            assert (await scorer.score(wrong_answer(task, row), row)).score == 0.0, row.id
    run_async(body())


def test_instruct_follow_gold_and_unscorable(run_async, monkeypatch):
    rows = {r.id: r for r in dev_rows("instruct_follow")}
    scorer = make_scorer("ifbench")

    async def body():
        for rid, response in IF_GOLD.items():
            assert (await scorer.score(response, rows[rid])).score == 1.0, rid
            assert (await scorer.score("no", rows[rid])).score == 0.0, rid
        import nltk
        monkeypatch.setattr(nltk.data, "path", [str(SHARED_DATA / "nltk_data")])  # no POS tagger there
        result = await scorer.score("Go there now.", rows["ifbench_258"])  # words:start_verb needs the tagger
        assert result.score is None
        assert "averaged_perceptron_tagger" in result.detail["could_not_check"]["words:start_verb"]
    run_async(body())


def test_choice_extraction():
    assert extract_choice("Answer: C") == "C"
    assert extract_choice("I think... the final answer is (B).") == "B"
    assert extract_choice("\\boxed{D}") == "D"
    assert extract_choice("<think>A? no</think>\n\nC") == "C"
    assert extract_choice('{"answer": "E"}') == "E"
    assert extract_choice("J. Ventricular septal defect") == "J"
    assert extract_choice("I cannot tell") is None
    assert extract_choice("A tough one.\n(C) Ethanol") == "C"


def test_judge_scores_by_verdict(scripted, run_async):
    row = load_rows(SHARED_DATA / "bench" / "physics" / "dev.jsonl", None, None, limit=1)[0]
    srv = scripted({"scripts": [
        {"match": "ANSWER-RIGHT", "llm_turns": [{"content": "Same value. CORRECT"}]},
        {"match": "ANSWER-WRONG", "llm_turns": [{"content": "It is CORRECT in form but the value is INCORRECT"}]},
        {"match": "ANSWER-VAGUE", "llm_turns": [{"content": "hmm"}, {"content": "hmm"}]}]})

    async def body():
        judge = Judge(OpenAIChatClient("judge", base_url=srv.url))
        assert (await judge.score("ANSWER-RIGHT", row)).score == 1.0
        assert (await judge.score("ANSWER-WRONG", row)).score == 0.0
        vague = await judge.score("ANSWER-VAGUE", row)
        assert vague.score is None and vague.detail["why"] == "no verdict"
        sent = srv.requests[0]["messages"][0]["content"]
        assert row.ground_truth in sent and "ANSWER-RIGHT" in sent and row.problem_statement[:50] in sent
        await judge.client.close()
    run_async(body())


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
    if task in ("physics", "long_context"):
        assert "offline approximation" in sb["score_method"] and sb["approximate"]
        assert result.summary["tasks"][task]["sandbox"]["approximate"]


def test_repeats_and_judge_wiring(scripted, run_async, tmp_path, docker_image):
    rows = dev_rows("physics")[:2]
    script = _bench_script("physics", rows)
    script["scripts"].append({"name": "the-judge", "llm_turns": [{"content": "CORRECT"}]})
    srv = scripted(script)
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": r.id, "problem_statement": r.problem_statement,
                                        "ground_truth": r.ground_truth}) + "\n" for r in rows))
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
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": r.id, "problem_statement": r.problem_statement,
                                        "ground_truth": r.ground_truth}) + "\n" for r in rows))
    run_dir = tmp_path / "run"
    exe = Path(sys.executable).parent / "insandbox"
    args = [str(exe), "bench", "chem", "--data", str(data), "--mode", "both", "--model", "m", "--base-url", srv.url,
            "--image", docker_image, "--concurrency", "2", "--output-dir", str(run_dir), "-q"]
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


def test_report_numbers_on_a_fixed_results_file(tmp_path):
    """tests/data/report_run: chem, 4 items in both modes and one sandbox infrastructure error.
    sandbox right on q1 q2 q4, plain right on q1 only."""
    out, data = write_report([REPORT_RUN], tmp_path / "report")
    acc = {a["mode"]: a for a in data["accuracy"]}
    sb, llm = acc["sandbox"], acc["llm"]
    assert (sb["n"], sb["items"], sb["errors"], sb["accuracy"]) == (4, 4, 1, 0.75)
    assert (llm["n"], llm["accuracy"]) == (4, 0.25)
    # Wilson, z = 1.96: 3/4 -> [0.3006, 0.9544]; 1/4 -> [0.0456, 0.6994]
    assert [round(x, 4) for x in sb["ci95"]] == [0.3006, 0.9544] and sb["ci_method"] == "wilson"
    assert [round(x, 4) for x in llm["ci95"]] == [0.0456, 0.6994]
    pair = data["paired"][0]
    # discordant pairs: sandbox only right on q2 and q4 (2), plain only right on none (0); exact p = 2 * 0.5^2
    assert (pair["pairs"], pair["sandbox_only"], pair["plain_only"]) == (4, 2, 0)
    assert pair["diff"] == 0.5 and pair["p_value"] == 0.5 and pair["test"] == "McNemar exact"
    # item differences 0, 1, 0, 1: mean 0.5, sd sqrt(1/3), t(0.975, 3) = 3.1824 -> half-width 0.9187,
    # so [-0.4187, 1.4187], clipped to the possible range [-1, 1]
    assert [round(x, 4) for x in pair["diff_ci95"]] == [-0.4187, 1.0]
    cap = data["capabilities"][0]
    # 9 turns: q1 pip | ls | editor writing numpy code | submit; q2 python | submit; q3 cat+grep | submit; q4 submit
    assert (cap["runs"], cap["turns"], cap["avg_turns"]) == (4, 9, 2.25)
    assert (cap["external_turns"], cap["file_turns"], cap["computation_turns"]) == (1, 3, 2)
    tok = {t["mode"]: t for t in data["tokens"]}
    assert tok["sandbox"]["env_share"] == 0.35 and tok["sandbox"]["trajectory_tokens"] == 2000
    ratio = data["token_ratio"][0]
    assert ratio["trajectory_ratio"] == 0.5 and ratio["billed_ratio"] == 1.5
    tm = {t["mode"]: t for t in data["time"]}
    assert tm["sandbox"]["model_share"] == 0.75 and tm["sandbox"]["tool_share"] == 0.075
    assert tm["sandbox"]["samples_per_min"] == 2.5  # 5 samples between t=1000 and t=1120
    md = (out / "report.md").read_text()
    assert "| fixture-model | chem | sandbox | 4 | 4 | 75.0% | 30.1% - 95.4% | 1 | 0 |" in md
    for png in ("accuracy.png", "capabilities.png", "tokens.png", "time.png"):
        assert (out / png).stat().st_size > 5000
    r = cli("report", str(REPORT_RUN), "--out", str(tmp_path / "cli"), "--no-plots")
    assert r.returncode == 0 and "75.0%" in r.stdout and (tmp_path / "cli" / "report.md").is_file()


def test_token_accounting_from_a_trajectory():
    from insandbox.analysis.accounting import token_breakdown

    steps = [{"prompt_tokens": 100, "completion_tokens": 10, "observation_chars": 400, "usage_reported": True},
             {"prompt_tokens": 150, "completion_tokens": 20, "observation_chars": 400, "usage_reported": True},
             {"prompt_tokens": 200, "completion_tokens": 5, "observation_chars": 40, "usage_reported": True}]
    t = token_breakdown({"steps": steps})
    # environment = (150 - 100 - 10) + (200 - 150 - 20) = 70; the last observation was never read
    assert t == {"initial_prompt_tokens": 100, "completion_tokens": 35, "env_tokens": 70, "trajectory_tokens": 205,
                 "billed_tokens": 485, "tokens_estimated": False}


def test_builtin_tasks_and_user_task(tmp_path):
    assert builtin_tasks() == sorted(TASKS)
    assert load_task("math").repeats == 16 and load_task("long_context").repeats == 4
    assert load_task("long_context").input_dir == "/testbed/documents"
    mine = tmp_path / "mine.yaml"
    mine.write_text("extends: _base\nscorer: exact\nrepeats: 3\ninstance_prompt: 'Q: {problem_statement}'\n")
    spec = load_task(mine)
    assert spec.name == "mine" and spec.repeats == 3 and "Linux computer" in spec.system_prompt
    with pytest.raises(ValueError, match="unknown task"):
        load_task("nope")


def test_infrastructure_failures_are_retried_and_kept_apart(scripted, run_async, tmp_path):
    rows = dev_rows("chem")[:3]
    srv = scripted({"scripts": [
        {"match": rows[0].problem_statement, "llm_turns": [{"content": f"Answer: {rows[0].ground_truth}",
                                                           "fail": {"status": 503, "times": 1}}]},
        {"match": rows[1].problem_statement, "llm_turns": [{"content": "x", "fail": {"status": 500, "times": 99}}]},
        {"match": rows[2].problem_statement, "llm_turns": [{"content": "Answer: Z"}]}]})
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": r.id, "problem_statement": r.problem_statement,
                                        "ground_truth": r.ground_truth}) + "\n" for r in rows))
    cfg = BenchConfig(task="chem", data=data, mode="llm", retries=1, retry_backoff_s=0.05, output_dir=tmp_path / "r",
                      run=RunConfig(model="m", base_url=srv.url, max_retries=0))
    result = run_async(run_bench(cfg))
    recs = {r["id"]: r for r in result.records}
    assert recs[rows[0].id]["score"] == 1.0 and recs[rows[0].id]["attempts"] == 2  # failed once, then fine
    bad = recs[rows[1].id]
    assert bad["score"] is None and "model_error" in bad["error"] and bad["attempts"] == 2
    assert recs[rows[2].id]["score"] == 0.0 and recs[rows[2].id]["error"] is None  # wrong, not an error
    summary = result.summary["tasks"]["chem"]["llm"]
    assert (summary["n"], summary["errors"], summary["accuracy"]) == (2, 1, 0.5)


def test_a_dead_model_server_stops_the_run(run_async, tmp_path):
    import socket
    from insandbox.bench.runner import MAX_CONSECUTIVE_INFRA, BenchAborted

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": f"r{i}", "problem_statement": f"q{i}", "ground_truth": "A"}) + "\n"
                            for i in range(MAX_CONSECUTIVE_INFRA + 5)))
    cfg = BenchConfig(task="chem", data=data, mode="llm", retries=0, concurrency=1, output_dir=tmp_path / "r",
                      run=RunConfig(model="m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0))
    with pytest.raises(BenchAborted, match="in a row failed"):
        run_async(run_bench(cfg))
    lines = (tmp_path / "r" / "results.jsonl").read_text().splitlines()
    assert len(lines) == MAX_CONSECUTIVE_INFRA and all(json.loads(x)["error"] for x in lines)
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["errors"] == MAX_CONSECUTIVE_INFRA


def test_intervals_over_items_when_items_repeat():
    from insandbox.bench import stats

    recs = [{"id": i, "repeat": k, "score": s} for i, ss in (("a", (1, 1)), ("b", (1, 0)), ("c", (0, 0)))
            for k, s in enumerate(ss)]
    acc = stats.accuracy(recs)
    # item means 1, 0.5, 0: mean 0.5, sd 0.5, t(0.975, 2) = 4.3027 -> half-width 1.242, clipped to [0, 1]
    assert acc["accuracy"] == 0.5 and acc["items"] == 3 and acc["ci_method"] == "t over item means"
    assert acc["ci95"] == [0.0, 1.0]
