"""`insandbox report RUN_DIR [RUN_DIR ...]`: what the benchmark runs say, as tables and plots.

For every (model, task, mode): accuracy with a 95% interval; sandbox minus plain on the
same items with McNemar's test; how often the model used external resources, file
management and computation (sandbox turns); tokens per sample split into initial
prompt, completion and environment (tool output), and the sandbox/plain token ratio;
model versus tool time and samples per minute. Written as report.md with PNG figures.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..analysis.capability import CAPABILITIES, usage
from . import stats
from .runner import BENCH_FILE
from .store import ResultStore, latest


@dataclass
class Group:
    """The samples of one model x task x mode, across the given runs."""

    model: str
    task: str
    mode: str
    records: list[dict] = field(default_factory=list)
    trajectories: list[dict] = field(default_factory=list)
    runs: list[Path] = field(default_factory=list)


def load_runs(run_dirs: list[Path]) -> dict[tuple[str, str, str], Group]:
    groups: dict[tuple[str, str, str], Group] = {}
    for run_dir in run_dirs:
        run_dir = Path(run_dir)
        meta_path = run_dir / BENCH_FILE
        if not meta_path.is_file():
            raise ValueError(f"{run_dir} is not a benchmark run folder (no {BENCH_FILE})")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        summary_path = run_dir / "summary.json"
        model = None
        if summary_path.is_file():
            model = json.loads(summary_path.read_text(encoding="utf-8")).get("model")
        model = model or meta["config"]["run"].get("model") or "embedded"
        for rec in latest(ResultStore(run_dir).load()):
            g = groups.setdefault((model, rec["task"], rec["mode"]), Group(model, rec["task"], rec["mode"]))
            if run_dir not in g.runs:
                g.runs.append(run_dir)
            g.records.append(rec)
            path = run_dir / rec.get("trajectory", "")
            if rec["mode"] == "sandbox" and path.is_file():
                g.trajectories.append(json.loads(path.read_text(encoding="utf-8")))
    return groups


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def token_row(g: Group) -> dict:
    ok = [r for r in g.records if not r.get("error")]
    keys = ("initial_prompt_tokens", "completion_tokens", "env_tokens", "trajectory_tokens", "billed_tokens")
    row = {k: _mean([r.get(k) or 0 for r in ok]) for k in keys}
    row["env_share"] = row["env_tokens"] / row["trajectory_tokens"] if row["trajectory_tokens"] else math.nan
    row["estimated"] = any(r.get("tokens_estimated") for r in ok)
    return row


def time_row(g: Group) -> dict:
    ok = [r for r in g.records if not r.get("error")]
    wall = sum(r.get("wall_time_s") or 0 for r in ok)
    span = (max(r["finished_at"] for r in g.records) - min(r["started_at"] for r in g.records)) if g.records else 0
    return {"samples": len(ok), "model_share": sum(r.get("model_time_s") or 0 for r in ok) / wall if wall else math.nan,
            "tool_share": sum(r.get("tool_time_s") or 0 for r in ok) / wall if wall else math.nan,
            "wall_per_sample_s": _mean([r.get("wall_time_s") or 0 for r in ok]),
            "samples_per_min": len(g.records) / span * 60 if span > 0 else math.nan}


def analyse(groups: dict[tuple[str, str, str], Group]) -> dict:
    """Every number of the report, as data (report.json)."""
    out: dict = {"accuracy": [], "paired": [], "capabilities": [], "tokens": [], "token_ratio": [], "time": []}
    for (model, task, mode), g in sorted(groups.items()):
        acc = stats.accuracy(g.records)
        methods = sorted({r.get("score_method") for r in g.records if r.get("score_method")})
        out["accuracy"].append({"model": model, "task": task, "mode": mode, **acc, "score_method": "; ".join(methods),
                                "approximate": any(r.get("approximate") for r in g.records)})
        out["tokens"].append({"model": model, "task": task, "mode": mode, **token_row(g)})
        out["time"].append({"model": model, "task": task, "mode": mode, **time_row(g)})
        if mode == "sandbox":
            out["capabilities"].append({"model": model, "task": task, **usage(g.trajectories)})
    for (model, task, mode), g in sorted(groups.items()):
        plain = groups.get((model, task, "llm"))
        if mode != "sandbox" or plain is None:
            continue
        pair = stats.paired(g.records, plain.records)
        if pair:
            out["paired"].append({"model": model, "task": task, **pair})
        s, p = token_row(g), token_row(plain)
        out["token_ratio"].append({"model": model, "task": task,
                                   "trajectory_ratio": s["trajectory_tokens"] / p["trajectory_tokens"]
                                   if p["trajectory_tokens"] else math.nan,
                                   "billed_ratio": s["billed_tokens"] / p["billed_tokens"]
                                   if p["billed_tokens"] else math.nan})
    return out


# ---------------------------------------------------------------------- rendering
def _pct(x: Optional[float]) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def _num(x: Optional[float], digits: int = 0) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.{digits}f}"


def _p(x: Optional[float]) -> str:
    return "-" if x is None else (f"{x:.3g}" if x >= 0.001 else "<0.001")


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def accuracy_rows(data: dict) -> list[list[str]]:
    return [[a["model"], a["task"], a["mode"], str(a["items"]), str(a["n"]),
             _pct(a["accuracy"]) + (" (approx.)" if a["approximate"] else ""),
             f"{_pct(a['ci95'][0])} - {_pct(a['ci95'][1])}" if a["ci95"] else "-",
             str(a["errors"]), str(a["unscored"]), a["score_method"]] for a in data["accuracy"]]


ACC_HEADER = ["model", "task", "mode", "items", "samples", "accuracy", "95% CI", "errors", "unscored", "scoring"]


def markdown(data: dict, run_dirs: list[Path], figures: list[str]) -> str:
    parts = ["# Benchmark report", "",
             "Runs: " + ", ".join(f"`{d}`" for d in run_dirs), "",
             "## Accuracy", "",
             "Intervals: Wilson for one binary sample per item, else a t-interval over item means (repeats of an "
             "item are not independent). Errors are infrastructure failures (model server, sandbox), not counted "
             "as wrong; unscored samples are answers that could not be checked. \"approx.\" marks an offline "
             "approximation of the paper's LLM judge.", "",
             _table(ACC_HEADER, accuracy_rows(data)), ""]
    if data["paired"]:
        parts += ["## Sandbox mode against plain mode (same items, same repeats)", "",
                  "diff = sandbox - plain; CI is a t-interval over items. McNemar's exact test on the discordant "
                  "pairs (sandbox right and plain wrong, or the reverse).", "",
                  _table(["model", "task", "pairs", "sandbox", "plain", "diff", "95% CI", "sandbox only right",
                          "plain only right", "test", "p"],
                         [[p["model"], p["task"], str(p["pairs"]), _pct(p["sandbox"]), _pct(p["plain"]),
                           f"{100 * p['diff']:+.1f} pt",
                           f"{100 * p['diff_ci95'][0]:+.1f} .. {100 * p['diff_ci95'][1]:+.1f}"
                           if not math.isnan(p["diff_ci95"][0]) else "-",
                           str(p.get("sandbox_only", "-")), str(p.get("plain_only", "-")), p["test"] or "-",
                           _p(p["p_value"])] for p in data["paired"]]), ""]
    if data["capabilities"]:
        parts += ["## Capability usage (sandbox mode)", "",
                  "Share of turns that used each capability, by pattern rules on the commands run and the code "
                  "written (see insandbox/analysis/capability.py).", "",
                  _table(["model", "task", "runs", "turns", "avg turns", "external resources", "file management",
                          "computation"],
                         [[c["model"], c["task"], str(c["runs"]), str(c["turns"]), _num(c["avg_turns"], 1),
                           *[_pct(c[f"{k}_rate"]) for k in CAPABILITIES]] for c in data["capabilities"]]), ""]
    parts += ["## Tokens per sample", "",
              "Initial prompt (system, task, tool schemas), completion (all generated tokens) and environment (tool "
              "output the model read, measured as the growth of the prompt between calls). Trajectory = their sum "
              "(the final conversation); billed = prompt + completion summed over calls.", "",
              _table(["model", "task", "mode", "initial prompt", "completion", "environment", "env share",
                      "trajectory", "billed"],
                     [[t["model"], t["task"], t["mode"], _num(t["initial_prompt_tokens"]), _num(t["completion_tokens"]),
                       _num(t["env_tokens"]), _pct(t["env_share"]), _num(t["trajectory_tokens"]),
                       _num(t["billed_tokens"]) + (" (est.)" if t["estimated"] else "")] for t in data["tokens"]]), ""]
    if data["token_ratio"]:
        parts += ["Sandbox / plain tokens per sample:", "",
                  _table(["model", "task", "trajectory ratio", "billed ratio"],
                         [[r["model"], r["task"], _num(r["trajectory_ratio"], 2) + "x",
                           _num(r["billed_ratio"], 2) + "x"]
                          for r in data["token_ratio"]]), ""]
    parts += ["## Time", "",
              _table(["model", "task", "mode", "samples", "model time", "tool time", "wall / sample", "samples / min"],
                     [[t["model"], t["task"], t["mode"], str(t["samples"]), _pct(t["model_share"]),
                       _pct(t["tool_share"]), _num(t["wall_per_sample_s"], 1) + " s", _num(t["samples_per_min"], 1)]
                      for t in data["time"]]), ""]
    if figures:
        parts += ["## Figures", ""] + [f"![{Path(f).stem}]({Path(f).name})" for f in figures] + [""]
    return "\n".join(parts)


def write_report(run_dirs: list[Path], out_dir: Optional[Path] = None, plots: bool = True) -> tuple[Path, dict]:
    run_dirs = [Path(d) for d in run_dirs]
    groups = load_runs(run_dirs)
    if not groups:
        raise ValueError("no finished samples in these runs")
    data = analyse(groups)
    out = Path(out_dir) if out_dir else run_dirs[0] / "report"
    out.mkdir(parents=True, exist_ok=True)
    figures = []
    if plots:
        from ..analysis import plots as P

        figures = P.all_figures(data, out)
    (out / "report.json").write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    (out / "report.md").write_text(markdown(data, run_dirs, figures), encoding="utf-8")
    return out, data


def rich_tables(data: dict):
    """The accuracy and paired tables for the terminal."""
    from rich.table import Table

    acc = Table(title="accuracy")
    for h in ACC_HEADER[:-1]:
        acc.add_column(h, justify="right" if h in ("items", "samples", "errors", "unscored") else "left")
    for row in accuracy_rows(data):
        acc.add_row(*row[:-1])
    tables = [acc]
    if data["paired"]:
        pt = Table(title="sandbox - plain (paired)")
        for h in ("model", "task", "pairs", "diff", "95% CI", "test", "p"):
            pt.add_column(h)
        for p in data["paired"]:
            pt.add_row(p["model"], p["task"], str(p["pairs"]), f"{100 * p['diff']:+.1f} pt",
                       f"{100 * p['diff_ci95'][0]:+.1f} .. {100 * p['diff_ci95'][1]:+.1f}"
                       if not math.isnan(p["diff_ci95"][0]) else "-", p["test"] or "-", _p(p["p_value"]))
        tables.append(pt)
    return tables
