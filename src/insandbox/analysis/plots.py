"""PNG figures of a report (matplotlib, no display needed)."""
from __future__ import annotations

import math
from pathlib import Path

MODE_COLORS = {"sandbox": "#2a7ab9", "llm": "#d9822b"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _run(row: dict) -> str:
    return row.get("run") or row["model"]  # "run": the label of a compared run (report.json before it: the model)


def _labels(rows: list[dict]) -> list[str]:
    runs = {_run(r) for r in rows}
    # one setting a line, so long labels stay readable under the bars
    return [r["task"] if len(runs) == 1 else r["task"] + "\n" + _run(r).replace(" · ", "\n") for r in rows]


def _finish(fig, ax, labels: list[str], ylabel: str, title: str, path: Path, top: float = None) -> Path:
    """Axis labels, legend, save, close: the same for every figure."""
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels)
    ax.set_ylabel(ylabel)
    if top is not None:
        ax.set_ylim(0, top)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    _plt().close(fig)
    return path


def accuracy_figure(data: dict, out: Path) -> Path:
    plt = _plt()
    keys = list(dict.fromkeys((_run(a), a["task"]) for a in data["accuracy"]))  # in the report's order
    modes = sorted({a["mode"] for a in data["accuracy"]}, key=lambda m: m != "sandbox")
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(keys) * len(modes)), 4))
    width = 0.8 / len(modes)
    for j, mode in enumerate(modes):
        xs, ys, err = [], [], [[], []]
        for i, key in enumerate(keys):
            a = next((a for a in data["accuracy"] if (_run(a), a["task"]) == key and a["mode"] == mode), None)
            if not a or a["accuracy"] is None:
                continue
            xs.append(i + (j - (len(modes) - 1) / 2) * width)
            ys.append(100 * a["accuracy"])
            lo, hi = a["ci95"] or (a["accuracy"], a["accuracy"])
            err[0].append(100 * (a["accuracy"] - lo))
            err[1].append(100 * (hi - a["accuracy"]))
        ax.bar(xs, ys, width, yerr=err, capsize=3, label=mode, color=MODE_COLORS.get(mode))
    return _finish(fig, ax, _labels([{"run": r, "task": t} for r, t in keys]), "accuracy (%)",
                   "Accuracy with 95% intervals", out / "accuracy.png", top=105)


def capability_figure(data: dict, out: Path) -> Path:
    plt = _plt()
    rows = data["capabilities"]
    fig, ax = plt.subplots(figsize=(max(5, 1.8 * len(rows)), 4))
    caps = (("external", "external resources"), ("file", "file management"), ("computation", "computation"))
    width = 0.8 / len(caps)
    for j, (key, label) in enumerate(caps):
        ax.bar([i + (j - 1) * width for i in range(len(rows))], [100 * r[f"{key}_rate"] for r in rows], width,
               label=label)
    return _finish(fig, ax, _labels(rows), "share of turns (%)", "Capability usage in sandbox mode",
                   out / "capabilities.png", top=105)


def token_figure(data: dict, out: Path) -> Path:
    plt = _plt()
    rows = data["tokens"]
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(rows)), 4))
    bottom = [0.0] * len(rows)
    for key, label in (("initial_prompt_tokens", "initial prompt"), ("completion_tokens", "completion"),
                       ("env_tokens", "environment")):
        vals = [0.0 if math.isnan(r[key]) else r[key] for r in rows]
        ax.bar(range(len(rows)), vals, 0.6, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, vals)]
    return _finish(fig, ax, [f"{lab}\n{r['mode']}" for lab, r in zip(_labels(rows), rows)], "tokens per sample",
                   "Where the tokens of a sample come from", out / "tokens.png")


def time_figure(data: dict, out: Path) -> Path:
    plt = _plt()
    rows = [t for t in data["time"] if t["mode"] == "sandbox"] or data["time"]
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(rows)), 4))
    model = [0.0 if math.isnan(r["model_share"]) else 100 * r["model_share"] for r in rows]
    tool = [0.0 if math.isnan(r["tool_share"]) else 100 * r["tool_share"] for r in rows]
    other = [max(0.0, 100 - m - t) for m, t in zip(model, tool)]
    ax.bar(range(len(rows)), model, 0.6, label="model")
    ax.bar(range(len(rows)), tool, 0.6, bottom=model, label="tools")
    ax.bar(range(len(rows)), other, 0.6, bottom=[m + t for m, t in zip(model, tool)], label="other", color="#bbbbbb")
    return _finish(fig, ax, _labels(rows), "share of wall time (%)", "Model time and tool time", out / "time.png")


def all_figures(data: dict, out: Path) -> list[str]:
    figures = [accuracy_figure(data, out), token_figure(data, out), time_figure(data, out)]
    if data["capabilities"]:
        figures.insert(1, capability_figure(data, out))
    return [str(f) for f in figures]
