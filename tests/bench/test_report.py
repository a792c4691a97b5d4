"""Benchmarks: scorers on the dev sets, each task end to end in both modes, resume, the report."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from insandbox.bench.experiment import differing, read_run
from insandbox.bench.report_files import write_report
from tests.helpers import cli

REPORT_RUN = Path(__file__).parents[1] / "data" / "report_run"

# IFBench has no reference responses: these are written to satisfy their rows' constraints


def test_report_numbers_on_a_fixed_results_file(tmp_path):
    """tests/data/report_run: chem, 4 items in both modes and one sandbox infrastructure error (a fifth
    item). sandbox right on q1 q2 q4, plain right on q1 only. The error counts as wrong in the accuracy
    (every sample counts), beside the accuracy over the scored samples."""
    out, data = write_report([REPORT_RUN], tmp_path / "report")
    acc = {a["mode"]: a for a in data["accuracy"]}
    sb, llm = acc["sandbox"], acc["llm"]
    assert (sb["n"], sb["items"], sb["scored"], sb["errors"], sb["accuracy"], sb["accuracy_scored"]) == \
        (5, 5, 4, 1, 0.6, 0.75)
    assert (llm["n"], llm["accuracy"], llm["accuracy_scored"]) == (4, 0.25, 0.25)
    # Wilson, z = 1.96: 3/5 -> [0.2307, 0.8824]; 3/4 -> [0.3006, 0.9544]; 1/4 -> [0.0456, 0.6994]
    assert [round(x, 4) for x in sb["ci95"]] == [0.2307, 0.8824] and sb["ci_method"] == "wilson"
    assert [round(x, 4) for x in sb["ci95_scored"]] == [0.3006, 0.9544]
    assert [round(x, 4) for x in llm["ci95"]] == [0.0456, 0.6994]
    assert data["warnings"] == ["chem sandbox: 1 of 5 samples ended in an error (20%, the infrastructure failed "
                                "them after their retries): the accuracy counts them as wrong; over the scored "
                                "samples only it is 75.0%"]
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
    assert "| fixture-model | chem | sandbox | 5 | 5 | 60.0% | 23.1% - 88.2% | 1 | 75.0% | 0 |" in md
    for png in ("accuracy.png", "capabilities.png", "tokens.png", "time.png"):
        assert (out / png).stat().st_size > 5000
    r = cli("report", str(REPORT_RUN), "--out", str(tmp_path / "cli"), "--no-plots")
    assert r.returncode == 0 and "60.0%" in r.stdout and "75.0%" in r.stdout
    assert (tmp_path / "cli" / "report.md").is_file()



COMPARE = Path(__file__).parents[1] / "data" / "compare_runs"
# chem, fixture-model, both modes; only max_steps defines a difference (concurrency, endpoint, key and folders
# differ too, which do not). steps5: sandbox right on q1, plain on q1, written before both choice verdicts were
# kept. steps20: sandbox right on q1-q3, plain on q1; the reference extraction would also credit sandbox q4 and
# plain q2. steps20-again: the same settings as steps20 on q3-q6, sandbox right on q3 q4 q6, plain on q6.
STEPS5, STEPS20, AGAIN = (COMPARE / n for n in ("chem-steps5", "chem-steps20", "chem-steps20-again"))


def test_settings_that_define_an_experiment():
    s20, again = read_run(STEPS20).settings, read_run(AGAIN).settings
    assert s20["max_steps"] == 20 and s20["temperature"] == 0.6 and s20["image"] == "insandbox:latest"
    assert "task.instance_prompt" in s20 and s20["task"] == "chem" and s20["model"] == "fixture-model"
    for infra in ("concurrency", "base_url", "api_key_set", "output_dir", "retries", "data", "limit", "ids"):
        assert infra not in s20
    assert differing([s20, again]) == []
    assert differing([read_run(STEPS5).settings, s20]) == ["max_steps"]


def test_runs_with_different_settings_are_compared_side_by_side(tmp_path):
    """Point i: two chem runs with different max_steps were pooled into one row; now each is its own."""
    out, data = write_report([STEPS5, STEPS20], tmp_path / "r")
    acc = {(a["run"], a["mode"]): a for a in data["accuracy"]}
    five, twenty = "fixture-model · max_steps=5", "fixture-model · max_steps=20"
    assert set(acc) == {(five, "sandbox"), (five, "llm"), (twenty, "sandbox"), (twenty, "llm")}
    assert (acc[(five, "sandbox")]["items"], acc[(five, "sandbox")]["n"], acc[(five, "sandbox")]["accuracy"]) == \
        (4, 4, 0.25)
    assert (acc[(twenty, "sandbox")]["n"], acc[(twenty, "sandbox")]["accuracy"]) == (4, 0.75)
    paired = {p["run"]: p for p in data["paired"]}
    assert paired[five]["pairs"] == 4 and paired[five]["diff"] == 0.0
    assert paired[twenty]["pairs"] == 4 and paired[twenty]["diff"] == 0.5
    runs = {r["run"]: r for r in data["runs"]}
    assert runs[five]["differs"] == {"max_steps": 5} and runs[twenty]["folders"] == [str(STEPS20)]
    md = (out / "report.md").read_text()
    assert "| fixture-model · max_steps=5 | chem | sandbox | 4 | 4 | 25.0% |" in md
    assert "| fixture-model · max_steps=20 | chem | sandbox | 4 | 4 | 75.0% |" in md
    assert {t["run"] for t in data["time"]} == {five, twenty}
    for png in ("accuracy.png", "tokens.png", "time.png"):
        assert (out / png).stat().st_size > 5000


def test_runs_with_identical_settings_are_told_apart_by_folder(tmp_path):
    out, data = write_report([STEPS20, AGAIN], tmp_path / "r", plots=False)
    labels = [r["run"] for r in data["runs"]]
    assert labels == ["fixture-model · chem-steps20", "fixture-model · chem-steps20-again"]
    assert data["poolable"] == [labels]
    assert {a["n"] for a in data["accuracy"]} == {4} and len(data["paired"]) == 2
    assert "`--merge` pools them" in (out / "report.md").read_text()


def test_pooling_refuses_runs_whose_settings_differ(tmp_path):
    with pytest.raises(ValueError, match="settings differ") as err:
        write_report([STEPS5, STEPS20], tmp_path / "r", plots=False, pool=True)
    assert "max_steps: chem-steps5=5, chem-steps20=20" in str(err.value)
    r = cli("report", str(STEPS5), str(STEPS20), "--merge", "--out", str(tmp_path / "cli"), "--no-plots")
    assert r.returncode == 2 and "max_steps" in r.stderr and not (tmp_path / "cli" / "report.md").exists()


def test_pooling_runs_with_identical_settings(tmp_path):
    out, data = write_report([STEPS20, AGAIN], tmp_path / "r", plots=False, pool=True)
    label = "fixture-model · 2 runs pooled"
    acc = {a["mode"]: a for a in data["accuracy"]}
    assert {a["run"] for a in data["accuracy"]} == {label}
    # q3 and q4 ran in both runs: two repeats each, so 6 items, 8 samples per mode
    assert (acc["sandbox"]["items"], acc["sandbox"]["n"], acc["sandbox"]["accuracy"]) == (6, 8, 0.75)
    assert (acc["llm"]["n"], acc["llm"]["accuracy"]) == (8, 0.25)
    pair = data["paired"][0]
    # pairs stay within a run: sandbox only right on q2, q3 (twice), q4 (second run); p = 2 * 0.5^4
    assert (pair["pairs"], pair["sandbox_only"], pair["plain_only"], pair["p_value"]) == (8, 4, 0, 0.125)
    tm = {t["mode"]: t for t in data["time"]}
    assert tm["sandbox"]["samples_per_min"] == 4.0  # 8 samples in 60 s + 60 s, not over the hours between the runs
    assert data["runs"][0]["pooled"] and data["runs"][0]["folders"] == [str(STEPS20), str(AGAIN)]
    r = cli("report", str(STEPS20), str(AGAIN), "--merge", "--out", str(tmp_path / "cli"), "--no-plots")
    assert r.returncode == 0, r.stderr
    assert f"| {label} | chem | sandbox | 6 | 8 | 75.0% |" in (tmp_path / "cli" / "report.md").read_text()


def test_choice_extractions_compared_per_run_and_mode(tmp_path):
    _, data = write_report([STEPS5, STEPS20], tmp_path / "r", plots=False)
    rows = {(c["run"], c["mode"]): c for c in data["choice_extractions"]}
    sb = rows[("fixture-model · max_steps=20", "sandbox")]
    assert (sb["samples"], sb["differ"], sb["reference_only_right"], sb["strict_only_right"]) == (4, 1, 1, 0)
    assert (sb["strict_accuracy"], sb["reference_accuracy"]) == (0.75, 1.0)
    assert rows[("fixture-model · max_steps=20", "llm")]["differ"] == 1
    old = rows[("fixture-model · max_steps=5", "sandbox")]  # older results: no verdicts, said so
    assert (old["samples"], old["not_recorded"]) == (0, 4)
    r = cli("report", str(STEPS20), "--out", str(tmp_path / "cli"), "--no-plots")
    assert r.returncode == 0 and "judged differently" in (tmp_path / "cli" / "report.md").read_text()


def test_the_step_limit_compared_is_the_one_the_samples_ran_with(tmp_path):
    """A task's own max_steps applies when --max-steps is not given; bench.json recorded the default beside it."""
    meta = json.loads((STEPS20 / "bench.json").read_text())
    del meta["max_steps"]  # as written before the effective limit was recorded
    meta["config"]["run"]["max_steps"] = 100
    meta["task"]["max_steps"] = 30
    for name, run_steps in (("old", 100), ("explicit", 12)):
        meta["config"]["run"]["max_steps"] = run_steps
        (tmp_path / name).mkdir()
        (tmp_path / name / "bench.json").write_text(json.dumps(meta))
    assert read_run(tmp_path / "old").settings["max_steps"] == 30
    assert read_run(tmp_path / "explicit").settings["max_steps"] == 12


def test_pooled_repeats_are_numbered_per_item_and_mode():
    from insandbox.bench.experiment import RunInfo, _renumber_repeats

    def rec(rid, mode, k):
        return {"id": rid, "mode": mode, "repeat": k}

    both = RunInfo(Path("both"), "m", "chem", 2, {}, [rec("q1", "sandbox", 0), rec("q1", "sandbox", 1),
                                                       rec("q1", "llm", 0), rec("q1", "llm", 1)])
    sandbox_only = RunInfo(Path("s"), "m", "chem", 2, {}, [rec("q1", "sandbox", 0), rec("q2", "sandbox", 0)])
    llm_only = RunInfo(Path("l"), "m", "chem", 2, {}, [rec("q2", "llm", 0)])
    _renumber_repeats([both, sandbox_only, llm_only])
    assert [r["repeat"] for r in both.records] == [0, 1, 0, 1]
    assert [r["repeat"] for r in sandbox_only.records] == [2, 0]  # q1 follows the first run's two repeats
    assert [r["repeat"] for r in llm_only.records] == [0]  # q2 plain pairs with q2 sandbox of the run before
    assert [r["run_repeat"] for r in sandbox_only.records] == [0, 0]


def _priced_copy(tmp_path: Path, name: str, costs: dict, price: dict) -> Path:
    """tests/data/report_run with each sample's cost (by mode) and the run's price."""
    run = tmp_path / name
    shutil.copytree(REPORT_RUN, run)
    records = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    for r in records:
        r["cost_usd"] = costs[r["mode"]]
    if costs["sandbox"] is not None:
        records[-1]["retry_cost_usd"] = 0.01  # q5, the sandbox error, paid for a failed attempt before it
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "summary.json").write_text(json.dumps({"model": "fixture-model", "price": price}))
    return run


def test_the_cost_per_run_and_mode_in_all_per_sample_and_per_correct_answer(tmp_path):
    from insandbox.bench.report import rich_tables
    from insandbox.models.pricing import Price

    price = Price(model="fixture-model", match="exact", entry="fixture-model", input=1.0, output=2.0, cache_read=1.0,
                  cache_write=1.0).model_dump()
    run = _priced_copy(tmp_path, "priced", {"sandbox": 0.02, "llm": 0.005}, price)
    out, data = write_report([run], tmp_path / "report", plots=False)
    cost = {c["mode"]: c for c in data["cost"]}
    # sandbox: 5 samples at 0.02 and a failed attempt at 0.01; 4 without an error; 3 right
    assert cost["sandbox"]["cost_usd"] == pytest.approx(0.11) and cost["sandbox"]["cost_per_sample_usd"] == 0.02
    assert cost["sandbox"]["cost_per_correct_usd"] == pytest.approx(0.11 / 3)
    assert cost["llm"]["cost_usd"] == pytest.approx(0.02) and cost["llm"]["cost_per_correct_usd"] == 0.02  # 1 right
    md = (out / "report.md").read_text()
    assert "| fixture-model | chem | sandbox | 5 | $0.110 | $0.0200 | $0.0367 | fixture-model: $1 in, $2 out per M " \
           "tokens |" in md
    assert "| fixture-model | chem | llm | 4 | $0.0200 | $0.00500 | $0.0200 |" in md
    assert any(t.title == "cost (USD)" for t in rich_tables(data))

    unknown = _priced_copy(tmp_path, "unknown", {"sandbox": None, "llm": None},
                           Price(model="fixture-model", match="unknown").model_dump())
    md = (write_report([unknown], tmp_path / "r2", plots=False)[0] / "report.md").read_text()
    assert "| fixture-model | chem | sandbox | 5 | unknown | unknown | unknown | no price for 'fixture-model' |" in md
    # runs of versions that recorded no cost: no cost section at all, rather than a table of unknowns
    assert "## Cost" not in (write_report([REPORT_RUN], tmp_path / "r3", plots=False)[0] / "report.md").read_text()
