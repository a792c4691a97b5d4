"""Accuracy with 95% confidence intervals, and sandbox-vs-plain comparisons on the same items.

Every sample counts: one the infrastructure failed (after its retries) counts as wrong in `accuracy`,
beside `accuracy_scored` over the scored ones and the number of errors.

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


def _interval(scores_by_item: dict[str, list[float]]) -> tuple[float, list[float], str]:
    """(mean, 95% interval, method) of the samples' scores, intervals over items (see the module)."""
    scores = [x for v in scores_by_item.values() for x in v]
    if all(len(v) == 1 for v in scores_by_item.values()) and is_binary(scores):
        k = sum(scores)
        return k / len(scores), list(wilson(k, len(scores))), "wilson"
    item_means = [sum(v) / len(v) for v in scores_by_item.values()]
    mean, lo, hi = t_interval(item_means)
    if len(set(item_means)) == 1 and is_binary(scores):
        # no spread between items (all right or all wrong): the t-interval collapses to a point;
        # count each item once instead (conservative)
        lo, hi = wilson(mean * len(item_means), len(item_means))
        method = "wilson over items"
    else:
        method = "t over item means"
    return sum(scores) / len(scores), [max(0.0, lo), min(1.0, hi)], method


FAILED_WARNING_SHARE = 0.05  # past this share of samples in error, the accuracy is flagged


def failed_warning(label: str, acc: dict) -> Optional[str]:
    """A line saying how many samples ended in an error, when more than 5% did (else None)."""
    if not acc.get("n") or not acc.get("errors") or acc["errors"] / acc["n"] <= FAILED_WARNING_SHARE:
        return None
    return (f"{label}: {acc['errors']} of {acc['n']} samples ended in an error ({100 * acc['errors'] / acc['n']:.0f}%, "
            "the infrastructure failed them after their retries): the accuracy counts them as wrong; over the "
            f"scored samples only it is {_pct_or_dash(acc.get('accuracy_scored'))}")


def _pct_or_dash(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def accuracy(records: list[dict]) -> dict:
    """Summary of one task x mode. `accuracy` counts every sample: one that ended in an error (the
    infrastructure failed it, retries spent) or that no scorer could score counts as wrong, so that a
    model cannot leave its hard items out by failing them. `accuracy_scored` is the same over the scored
    samples only; `errors` and `unscored` say how many the two differ by."""
    scored = [r for r in records if r.get("score") is not None and not r.get("error")]
    every: dict[str, list[float]] = defaultdict(list)
    only_scored: dict[str, list[float]] = defaultdict(list)
    for r in records:
        value = float(r["score"]) if r.get("score") is not None and not r.get("error") else 0.0
        every[str(r["id"])].append(value)
    for r in scored:
        only_scored[str(r["id"])].append(float(r["score"]))
    errors = sum(1 for r in records if r.get("error"))
    out = {"n": len(records), "items": len(every), "scored": len(scored), "errors": errors,
           "unscored": sum(1 for r in records if r.get("score") is None and not r.get("error")),
           "error_rate": round(errors / len(records), 6) if records else None,
           "accuracy": None, "ci95": None, "ci_method": None, "accuracy_scored": None, "ci95_scored": None}
    if records:
        out["accuracy"], out["ci95"], out["ci_method"] = _interval(every)
    if scored:
        out["accuracy_scored"], out["ci95_scored"], _ = _interval(only_scored)
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
