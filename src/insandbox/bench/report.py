"""`insandbox report RUN_DIR [RUN_DIR ...]`: what the benchmark runs say, as tables and plots.

Runs are compared side by side, never pooled unless asked (`pool=True`, `--merge`: runs of the
same task and model with identical settings; see experiment.py). Each compared run (or pooled
group) has a label: its model and the settings that tell it apart. For every run x task x
mode: accuracy with a 95% interval; sandbox minus plain on the same items of the same run with
McNemar's test; for choice tasks, how many samples the strict and the reference extraction
judge differently; how often the model used external resources, file management and
computation (sandbox turns); how many sandbox samples made no tool call (a warning when most did:
their score is that of the model without its tools); tokens per sample split into initial prompt, completion and
environment (tool output), and the sandbox/plain token ratio; what the samples cost (in all,
per sample, per correct answer; unknown where the model had no price); model versus tool time
and samples per minute; each item's score per mode. Written as report.md, report.json, PNG figures
and report.html (all of report.md in one self-contained file, see report_html.py).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..analysis.accounting import cost_summary
from ..analysis.capability import CAPABILITIES, usage
from ..models.pricing import Price, usd
from . import degraded, stats
from .experiment import Unit, same_settings, show, units_of


@dataclass
class Group:
    """The samples of one compared run (or pooled group) x task x mode."""

    run: str  # the label of the run, or of the pooled group
    model: str
    task: str
    mode: str
    records: list[dict] = field(default_factory=list)
    trajectories: list[dict] = field(default_factory=list)
    runs: list[Path] = field(default_factory=list)
    prices: list[dict] = field(default_factory=list)  # the prices its runs were charged at, each once


Key = tuple[str, str, str]  # (run label, task, mode)


def load_units(run_dirs: list[Path], pool: bool = False) -> tuple[list[Unit], dict[Key, Group]]:
    units = units_of([Path(d) for d in run_dirs], pool)
    groups: dict[Key, Group] = {}
    for unit in units:
        for run in unit.runs:
            for rec in run.records:
                key = (unit.label, rec["task"], rec["mode"])
                g = groups.setdefault(key, Group(unit.label, unit.model, rec["task"], rec["mode"]))
                if run.path not in g.runs:
                    g.runs.append(run.path)
                    if run.price and run.price not in g.prices:
                        g.prices.append(run.price)
                g.records.append(rec)
                path = run.path / rec.get("trajectory", "")
                if rec["mode"] == "sandbox" and path.is_file():
                    g.trajectories.append(json.loads(path.read_text(encoding="utf-8")))
    return units, groups


def load_runs(run_dirs: list[Path], pool: bool = False) -> dict[Key, Group]:
    return load_units(run_dirs, pool)[1]


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
    span = 0.0  # summed over the runs of a pooled group: the time between runs is no benchmark time
    for run in {r.get("run") for r in g.records}:
        mine = [r for r in g.records if r.get("run") == run]
        span += max(r["finished_at"] for r in mine) - min(r["started_at"] for r in mine)
    return {"samples": len(ok), "model_share": sum(r.get("model_time_s") or 0 for r in ok) / wall if wall else math.nan,
            "tool_share": sum(r.get("tool_time_s") or 0 for r in ok) / wall if wall else math.nan,
            "wall_per_sample_s": _mean([r.get("wall_time_s") or 0 for r in ok]),
            "samples_per_min": len(g.records) / span * 60 if span > 0 else math.nan}


def cost_row(g: Group) -> dict:
    """What the samples cost, and the price they were charged at."""
    if not g.prices:
        price = "-"
    elif len(g.prices) > 1:
        price = "several (report.json: runs)"
    else:
        price = Price.model_validate(g.prices[0]).describe()
    return {"samples": len(g.records), "priced": sum(1 for r in g.records if r.get("cost_usd") is not None),
            **cost_summary(g.records), "price": price, "prices": g.prices}


def choice_row(g: Group) -> Optional[dict]:
    """For a choice task: how the strict and the reference extraction judge the same samples."""
    both = [r["score_detail"]["extractions"] for r in g.records
            if not r.get("error") and isinstance(r.get("score_detail"), dict) and "extractions" in r["score_detail"]]
    if not both and not any(str(r.get("score_method", "")).startswith("choice letter") for r in g.records):
        return None
    strict = [e["strict"]["score"] for e in both]
    ref = [e["reference"]["score"] for e in both]
    return {"samples": len(both),
            "not_recorded": sum(1 for r in g.records if not r.get("error")) - len(both),
            "differ": sum(1 for a, b in zip(strict, ref) if a != b),
            "strict_only_right": sum(1 for a, b in zip(strict, ref) if a > b),
            "reference_only_right": sum(1 for a, b in zip(strict, ref) if b > a),
            "strict_accuracy": _mean(strict), "reference_accuracy": _mean(ref)}


def _natural(text: str) -> list:
    """q2 before q10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def item_rows(ordered_groups: list[tuple[Key, Group]]) -> list[dict]:
    """Each item of each run x task, with its samples, infrastructure errors and mean score per mode."""
    items: dict[tuple[str, str, str], dict] = {}
    for (run, task, mode), g in ordered_groups:
        for r in g.records:
            row = items.setdefault((run, task, str(r["id"])),
                                   {"run": run, "model": g.model, "task": task, "id": str(r["id"]), "modes": {}})
            m = row["modes"].setdefault(mode, {"samples": 0, "errors": 0, "scores": []})
            m["samples"] += 1
            m["errors"] += bool(r.get("error"))
            if r.get("score") is not None and not r.get("error"):
                m["scores"].append(float(r["score"]))
    runs = list(dict.fromkeys(run for run, _, _ in items))
    out = sorted(items.values(), key=lambda row: (runs.index(row["run"]), row["task"], _natural(row["id"])))
    for row in out:
        for m in row["modes"].values():
            scores = m.pop("scores")
            m["score"] = sum(scores) / len(scores) if scores else None
    return out


def runs_section(units: list[Unit]) -> list[dict]:
    return [{"run": u.label, "model": u.model, "task": u.task, "folders": [str(r.path) for r in u.runs],
             "pooled": len(u.runs) > 1, "differs": u.differs, "settings": u.settings} for u in units]


def analyse(groups: dict[Key, Group], units: Optional[list[Unit]] = None) -> dict:
    """Every number of the report, as data (report.json)."""
    out: dict = {"runs": runs_section(units or []), "accuracy": [], "paired": [], "choice_extractions": [],
                 "capabilities": [], "tokens": [], "token_ratio": [], "cost": [], "time": [], "warnings": []}
    order = {u.label: i for i, u in enumerate(units or [])}  # runs in the order given
    tool_format = {u.label: u.settings.get("tool_format") for u in units or []}

    def ordered(items):
        return sorted(items, key=lambda kv: (order.get(kv[0][0], len(order)), kv[0]))

    for (run, task, mode), g in ordered(groups.items()):
        who = {"run": run, "model": g.model, "task": task}
        acc = stats.accuracy(g.records)
        methods = sorted({r.get("score_method") for r in g.records if r.get("score_method")})
        tools = degraded.no_tool_call(g.records) if mode == "sandbox" else \
            {"no_tool_call": None, "no_tool_call_of": None, "no_tool_call_share": None}
        out["accuracy"].append({**who, "mode": mode, **acc, "score_method": "; ".join(methods),
                                "approximate": any(r.get("approximate") for r in g.records), **tools})
        failed = stats.failed_warning(f"{task} {mode}" if len(order) < 2 else f"{task} {mode} ({run})", acc)
        if failed:
            out["warnings"].append(failed)
        if mode == "sandbox" and degraded.is_most(tools["no_tool_call"], tools["no_tool_call_of"]):
            label = task if len(order) < 2 else f"{task} ({run})"
            out["warnings"].append(degraded.warning(label, tools["no_tool_call"], tools["no_tool_call_of"],
                                                    tool_format.get(run)))
        choice = choice_row(g)
        if choice is not None:
            out["choice_extractions"].append({**who, "mode": mode, **choice})
        out["tokens"].append({**who, "mode": mode, **token_row(g)})
        out["cost"].append({**who, "mode": mode, **cost_row(g)})
        out["time"].append({**who, "mode": mode, **time_row(g)})
        if mode == "sandbox":
            out["capabilities"].append({**who, **usage(g.trajectories)})
    for (run, task, mode), g in ordered(groups.items()):
        plain = groups.get((run, task, "llm"))  # the same run (or pooled group) only
        if mode != "sandbox" or plain is None:
            continue
        who = {"run": run, "model": g.model, "task": task}
        pair = stats.paired(g.records, plain.records)
        if pair:
            out["paired"].append({**who, **pair})
        s, p = token_row(g), token_row(plain)
        out["token_ratio"].append({**who,
                                   "trajectory_ratio": s["trajectory_tokens"] / p["trajectory_tokens"]
                                   if p["trajectory_tokens"] else math.nan,
                                   "billed_ratio": s["billed_tokens"] / p["billed_tokens"]
                                   if p["billed_tokens"] else math.nan})
    out["poolable"] = [[u.label for u in same] for same in same_settings(units or [])]
    out["items"] = item_rows(ordered(groups.items()))
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


def _no_tool_call(a: dict) -> str:
    """'3 of 4' for sandbox mode; '-' for plain mode and for results that did not record their tool calls."""
    if not a.get("no_tool_call_of"):
        return "-"
    return f"{a['no_tool_call']} of {a['no_tool_call_of']}"


def accuracy_rows(data: dict) -> list[list[str]]:
    return [[a["run"], a["task"], a["mode"], str(a["items"]), str(a["n"]),
             _pct(a["accuracy"]) + (" (approx.)" if a["approximate"] else ""),
             f"{_pct(a['ci95'][0])} - {_pct(a['ci95'][1])}" if a["ci95"] else "-",
             str(a["errors"]), _pct(a.get("accuracy_scored", a["accuracy"])), str(a["unscored"]), _no_tool_call(a),
             a["score_method"]] for a in data["accuracy"]]


# accuracy counts every sample (an error as wrong); "scored accuracy" is over the scored ones only
ACC_HEADER = ["run", "task", "mode", "items", "samples", "accuracy", "95% CI", "errors", "scored accuracy", "unscored",
              "no tool call", "scoring"]
CHOICE_HEADER = ["run", "task", "mode", "samples", "judged differently", "strict", "reference", "strict only right",
                 "reference only right"]


def choice_rows(data: dict) -> list[list[str]]:
    return [[c["run"], c["task"], c["mode"], str(c["samples"]),
             str(c["differ"]) if c["samples"] else "not recorded", _pct(c["strict_accuracy"]),
             _pct(c["reference_accuracy"]), str(c["strict_only_right"]), str(c["reference_only_right"])]
            for c in data["choice_extractions"]]


def _ci(lo: float, hi: float) -> str:
    return f"{100 * lo:+.1f} .. {100 * hi:+.1f}" if not math.isnan(lo) else "-"


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]


@dataclass
class Alert:
    """A paragraph that must not be missed: the results may not measure what they seem to."""

    text: str


@dataclass
class Section:
    """One part of the report: a title, then paragraphs (`code` in backticks) and tables, in order. report.md and
    report.html both render these, so they say the same."""

    title: str
    blocks: list  # of str (a paragraph), Alert and Table
    anchor: str = ""


def runs_blocks(data: dict) -> list:
    rows = [[r["run"], r["task"], ", ".join(f"`{Path(f).name}`" for f in r["folders"]),
             "; ".join(f"{k}={show(v)}" for k, v in r["differs"].items()) or "-"] for r in data["runs"]]
    if any(r["pooled"] for r in data["runs"]):
        how = ("Pooled (`--merge`): the runs of one task and model, whose settings are identical, as one; an item's "
               "repeats in a later run follow those of the earlier runs, per mode, so a run's sandbox and plain "
               "samples pair with each other.")
    else:
        how = "Each run is reported on its own (`--merge` pools runs of one task and model with identical settings)."
    blocks = [how + " A run is labelled by its model and the settings that differ from the other runs of its task; "
              "long values (prompts) by a digest. Settings in full: report.json, `runs`.",
              Table(["run", "task", "folders", "differs in"], rows)]
    for labels in data.get("poolable", []):
        blocks.append("Same settings, reported apart: " + ", ".join(f"`{x}`" for x in labels)
                      + " (`--merge` pools them).")
    return blocks


COST_HEADER = ["run", "task", "mode", "samples", "in all", "per sample", "per correct answer", "price"]


def has_cost(data: dict) -> bool:
    """Whether the runs recorded costs (runs of older versions did not)."""
    return any(c["priced"] or c["prices"] for c in data.get("cost", []))


def _usd_or_dash(amount: Optional[float], priced: int) -> str:
    """Unknown without a price; a dash where there is nothing to divide by (no sample ok, none right)."""
    return "unknown" if not priced else "-" if amount is None else usd(amount)


def cost_rows(data: dict) -> list[list[str]]:
    rows = []
    for c in data["cost"]:
        unknown = f" ({c['cost_unknown']} unknown)" if c["cost_unknown"] and c["priced"] else ""
        rows.append([c["run"], c["task"], c["mode"], str(c["samples"]), usd(c["cost_usd"]) + unknown,
                     _usd_or_dash(c["cost_per_sample_usd"], c["priced"]),
                     _usd_or_dash(c["cost_per_correct_usd"], c["priced"]), c["price"]])
    return rows


def sections(data: dict, runs_always: bool = False) -> list[Section]:
    """Every table of the report with the text that explains it (the runs table only when there is more than one
    run to tell apart, unless `runs_always`)."""
    out = []
    if runs_always or len(data["runs"]) > 1 or any(r["pooled"] for r in data["runs"]):
        out.append(Section("Runs", runs_blocks(data), "runs"))
    out.append(Section("Accuracy", [Alert(w) for w in data.get("warnings", [])] + [
        "Intervals: Wilson for one binary sample per item, else a t-interval over item means (repeats of an "
        "item are not independent). Errors are infrastructure failures (model server, sandbox), not counted "
        "as wrong; unscored samples are answers that could not be checked. \"approx.\" marks an offline "
        "approximation of the paper's LLM judge. No tool call: the sandbox-mode samples (of those that ran "
        "without an error) in which the model called no tool, not even submit.",
        Table(ACC_HEADER, accuracy_rows(data))], "accuracy"))
    if data["paired"]:
        out.append(Section("Sandbox mode against plain mode (same run, same items, same repeats)", [
            "diff = sandbox - plain; CI is a t-interval over items. McNemar's exact test on the discordant "
            "pairs (sandbox right and plain wrong, or the reverse).",
            Table(["run", "task", "pairs", "sandbox", "plain", "diff", "95% CI", "sandbox only right",
                   "plain only right", "test", "p"],
                  [[p["run"], p["task"], str(p["pairs"]), _pct(p["sandbox"]), _pct(p["plain"]),
                    f"{100 * p['diff']:+.1f} pt", _ci(*p["diff_ci95"]),
                    str(p.get("sandbox_only", "-")), str(p.get("plain_only", "-")), p["test"] or "-",
                    _p(p["p_value"])] for p in data["paired"]])], "paired"))
    if data["choice_extractions"]:
        out.append(Section("Choice letters: strict against reference extraction", [
            "The same answers read by the strict extraction (`choice`: only the row's options, no letter glued "
            "to other text, several letters are no answer) and by the reference implementation's lenient one "
            "(`choice-reference`, as in the paper). \"not recorded\": results written before both verdicts "
            "were kept.",
            Table(CHOICE_HEADER, choice_rows(data))], "choice"))
    if data["capabilities"]:
        out.append(Section("Capability usage (sandbox mode)", [
            "Share of turns that used each capability, by pattern rules on the commands run and the code "
            "written (see insandbox/analysis/capability.py).",
            Table(["run", "task", "runs", "turns", "avg turns", "external resources", "file management",
                   "computation"],
                  [[c["run"], c["task"], str(c["runs"]), str(c["turns"]), _num(c["avg_turns"], 1),
                    *[_pct(c[f"{k}_rate"]) for k in CAPABILITIES]] for c in data["capabilities"]])], "capabilities"))
    tokens = [
        "Initial prompt (system, task, tool schemas), completion (all generated tokens) and environment (tool "
        "output the model read, measured as the growth of the prompt between calls). Trajectory = their sum "
        "(the final conversation); billed = prompt + completion summed over calls.",
        Table(["run", "task", "mode", "initial prompt", "completion", "environment", "env share", "trajectory",
               "billed"],
              [[t["run"], t["task"], t["mode"], _num(t["initial_prompt_tokens"]), _num(t["completion_tokens"]),
                _num(t["env_tokens"]), _pct(t["env_share"]), _num(t["trajectory_tokens"]),
                _num(t["billed_tokens"]) + (" (est.)" if t["estimated"] else "")] for t in data["tokens"]])]
    if data["token_ratio"]:
        tokens += ["Sandbox / plain tokens per sample:",
                   Table(["run", "task", "trajectory ratio", "billed ratio"],
                         [[r["run"], r["task"], _num(r["trajectory_ratio"], 2) + "x", _num(r["billed_ratio"], 2) + "x"]
                          for r in data["token_ratio"]])]
    out.append(Section("Tokens per sample", tokens, "tokens"))
    if has_cost(data):
        out.append(Section("Cost", [
            "USD, from each call's tokens at the price shown (a price table of list prices, with the user's "
            "own files over it: docs/guide/cost.md ('Cost')). In all: every sample, infrastructure errors and "
            "their retries included; per sample: the samples without an infrastructure error; per correct "
            "answer: in all divided by the score summed. A model without a price is \"unknown\", never $0.",
            Table(COST_HEADER, cost_rows(data))], "cost"))
    out.append(Section("Time", [
        Table(["run", "task", "mode", "samples", "model time", "tool time", "wall / sample", "samples / min"],
              [[t["run"], t["task"], t["mode"], str(t["samples"]), _pct(t["model_share"]), _pct(t["tool_share"]),
                _num(t["wall_per_sample_s"], 1) + " s", _num(t["samples_per_min"], 1)] for t in data["time"]])],
        "time"))
    return out


def markdown(data: dict, run_dirs: list[Path], figures: list[str]) -> str:
    parts = ["# Benchmark report", "",
             "Runs: " + ", ".join(f"`{d}`" for d in run_dirs), ""]
    for section in sections(data):
        parts += [f"## {section.title}", ""]
        for block in section.blocks:
            if isinstance(block, Alert):
                parts += [f"> **Warning:** {block.text}", ""]
            else:
                parts += [_table(block.header, block.rows) if isinstance(block, Table) else block, ""]
    if figures:
        parts += ["## Figures", ""] + [f"![{Path(f).stem}]({Path(f).name})" for f in figures] + [""]
    return "\n".join(parts)


def rich_tables(data: dict):
    """The accuracy, paired, cost and choice-extraction tables for the terminal, then the warnings. Names from
    the runs are shown as text (console.shown), never as markup or terminal controls."""
    from rich.table import Table
    from rich.text import Text

    from ..core.text import shown

    acc = Table(title="accuracy")
    for h in ACC_HEADER[:-1]:
        acc.add_column(h, justify="right" if h in ("items", "samples", "errors", "unscored", "no tool call",
                                                   "scored accuracy") else "left")
    for row in accuracy_rows(data):
        acc.add_row(*map(shown, row[:-1]))
    tables = [acc]
    if data["paired"]:
        pt = Table(title="sandbox - plain (paired, within a run)")
        for h in ("run", "task", "pairs", "diff", "95% CI", "test", "p"):
            pt.add_column(h)
        for p in data["paired"]:
            pt.add_row(shown(p["run"]), shown(p["task"]), str(p["pairs"]), f"{100 * p['diff']:+.1f} pt",
                       _ci(*p["diff_ci95"]), p["test"] or "-", _p(p["p_value"]))
        tables.append(pt)
    if has_cost(data):
        cost = Table(title="cost (USD)")
        for h in COST_HEADER:
            cost.add_column(h, justify="right" if h in ("samples", "in all", "per sample", "per correct answer")
                            else "left")
        for row in cost_rows(data):
            cost.add_row(*map(shown, row))
        tables.append(cost)
    if data["choice_extractions"]:
        ct = Table(title="choice letters: strict vs reference extraction")
        for h in CHOICE_HEADER:
            ct.add_column(h)
        for row in choice_rows(data):
            ct.add_row(*map(shown, row))
        tables.append(ct)
    for w in data.get("warnings", []):
        tables.append(Text("warning: " + shown(w), style="yellow"))
    return tables
