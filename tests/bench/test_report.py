"""Benchmarks: scorers on the dev sets, each task end to end in both modes, resume, the report."""
from __future__ import annotations

from pathlib import Path

from insandbox.bench.report import write_report
from tests.helpers import cli

REPORT_RUN = Path(__file__).parents[1] / "data" / "report_run"

# IFBench has no reference responses: these are written to satisfy their rows' constraints


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

