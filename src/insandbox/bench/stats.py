"""Accuracy with 95% confidence intervals, and sandbox-vs-plain comparisons on the same items.

Repeats of one item are not independent, so intervals are computed over items: each
item's mean score over its repeats, then a t-interval over items. With one binary sample
per item that is replaced by the Wilson interval (well behaved at 0% and 100%), and so it
is, counting each item once, when every item scored the same. Paired
comparisons match samples of the same item and repeat: the mean difference with a
t-interval over items, and McNemar's exact test on the discordant pairs when scores are
binary (a Wilcoxon signed-rank test on item differences otherwise).
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Optional

from ..analysis.accounting import cost_summary
from . import degraded


def wilson(k: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (round(max(0.0, centre - half), 6), round(min(1.0, centre + half), 6))


def t_interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high) of a 95% t-interval; the interval is the mean itself for n < 2."""
    n = len(values)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    mean = sum(values) / n
    if n < 2:
        return (mean, mean, mean)
    from scipy import stats

    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return (mean, mean - half, mean + half)


def is_binary(scores: list[float]) -> bool:
    return all(s in (0.0, 1.0) for s in scores)


def accuracy(records: list[dict]) -> dict:
    """Summary of one task x mode: n, items, accuracy, ci95 and how it was computed."""
    scored = [r for r in records if r.get("score") is not None and not r.get("error")]
    by_item: dict[str, list[float]] = defaultdict(list)
    for r in scored:
        by_item[str(r["id"])].append(float(r["score"]))
    scores = [float(r["score"]) for r in scored]
    out = {"n": len(scored), "items": len(by_item), "errors": sum(1 for r in records if r.get("error")),
           "unscored": sum(1 for r in records if r.get("score") is None and not r.get("error")),
           "accuracy": None, "ci95": None, "ci_method": None}
    if not scored:
        return out
    if all(len(v) == 1 for v in by_item.values()) and is_binary(scores):
        k = sum(scores)
        out.update(accuracy=k / len(scores), ci95=list(wilson(k, len(scores))), ci_method="wilson")
    else:
        item_means = [sum(v) / len(v) for v in by_item.values()]
        mean, lo, hi = t_interval(item_means)
        if len(set(item_means)) == 1 and is_binary(scores):
            # no spread between items (all right or all wrong): the t-interval collapses to a point;
            # count each item once instead (conservative)
            lo, hi = wilson(mean * len(item_means), len(item_means))
            method = "wilson over items"
        else:
            method = "t over item means"
        out.update(accuracy=sum(scores) / len(scores), ci95=[max(0.0, lo), min(1.0, hi)], ci_method=method)
    return out


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for b and c discordant pairs."""
    if b + c == 0:
        return 1.0
    from scipy import stats

    return float(stats.binomtest(b, b + c, 0.5).pvalue)


def _scored_by_sample(records: list[dict]) -> dict[tuple[str, int], float]:
    return {(str(r["id"]), r["repeat"]): float(r["score"]) for r in records
            if r.get("score") is not None and not r.get("error")}


def paired(sandbox: list[dict], plain: list[dict]) -> Optional[dict]:
    """Sandbox minus plain on the samples both modes scored (same item, same repeat)."""
    a, b = _scored_by_sample(sandbox), _scored_by_sample(plain)
    keys = sorted(set(a) & set(b))
    if not keys:
        return None
    item_diffs: dict[str, list[float]] = defaultdict(list)
    for k in keys:
        item_diffs[k[0]].append(a[k] - b[k])
    mean, lo, hi = t_interval([sum(v) / len(v) for v in item_diffs.values()])
    out = {"pairs": len(keys), "items": len(item_diffs), "sandbox": sum(a[k] for k in keys) / len(keys),
           "plain": sum(b[k] for k in keys) / len(keys), "diff": sum(a[k] - b[k] for k in keys) / len(keys),
           "diff_ci95": [max(-1.0, lo), min(1.0, hi)], "test": None, "p_value": None}
    if is_binary([a[k] for k in keys] + [b[k] for k in keys]):
        wins = sum(1 for k in keys if a[k] == 1 and b[k] == 0)
        losses = sum(1 for k in keys if a[k] == 0 and b[k] == 1)
        out.update(test="McNemar exact", sandbox_only=wins, plain_only=losses, p_value=mcnemar_exact(wins, losses))
    else:
        diffs = [sum(v) / len(v) for v in item_diffs.values()]
        if any(d != 0 for d in diffs):
            from scipy import stats

            out.update(test="Wilcoxon signed-rank (items)", p_value=float(stats.wilcoxon(diffs).pvalue))
    return out


def summarize(records: list[dict]) -> dict:
    """summary.json: per task and mode (accuracy, cost; in sandbox mode the samples with no tool call), the
    paired comparison where both modes ran, and the cost of the whole benchmark."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["task"], r["mode"])].append(r)
    everything = cost_summary(records)
    out: dict = {"tasks": {}, "cost_usd": everything["cost_usd"], "cost_unknown": everything["cost_unknown"]}
    for (task, mode), recs in sorted(groups.items()):
        entry = out["tasks"].setdefault(task, {})
        entry[mode] = accuracy(recs)
        methods = {r.get("score_method") for r in recs if r.get("score_method")}
        entry[mode]["score_method"] = sorted(methods)[0] if len(methods) == 1 else sorted(methods)
        entry[mode]["approximate"] = any(r.get("approximate") for r in recs)
        entry[mode].update(cost_summary(recs))
        if mode == "sandbox":  # samples with no tool call: a score of the model without its tools (degraded.py)
            entry[mode].update(degraded.no_tool_call(recs))
    for task, entry in out["tasks"].items():
        if "sandbox" in entry and "llm" in entry:
            entry["sandbox_vs_llm"] = paired(groups[(task, "sandbox")], groups[(task, "llm")])
    return out
