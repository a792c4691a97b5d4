"""report.html: everything report.md says, in one file that needs nothing else (a mail attachment, offline).

The tables and their explanations come from report.sections(), as in report.md; the run settings are shown
in full (long values cut, with a pointer to report.json), each figure is embedded as a data: URI beside the
table it draws, with a caption, and the items follow with their score per mode (the first `item_limit`).
The template (templates/report.html.j2) escapes every string, so names from runs cannot inject markup.
"""
from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Optional, Union

from markupsafe import Markup, escape

from .report import Alert, Section, Table, sections

ITEM_LIMIT = 200  # rows of the items table; all of them are in report.json
SETTING_CHARS = 400  # longer setting values (prompts) are cut

# where each figure of analysis/plots.py goes, and what it shows
CAPTIONS = {
    "accuracy": ("accuracy", "Accuracy per run, task and mode; the whiskers are the 95% intervals of the table "
                             "above."),
    "capabilities": ("capabilities", "Share of sandbox turns that used external resources, file management and "
                                     "computation."),
    "tokens": ("tokens", "Tokens per sample, stacked: initial prompt, completion and environment (tool output the "
                         "model read)."),
    "time": ("time", "Share of a sample's wall time spent in model calls, in tools, and in the rest (sandbox start, "
                     "scoring); sandbox mode where the run has it."),
}
MIME = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}
TEXT_COLUMNS = {"run", "task", "mode", "scoring", "test", "price", "folders", "differs in"}
NAME_COLUMNS = {"run", "task", "mode"}  # kept on one line on screen (a label broken at its hyphen misleads)
_DIGITS = re.compile(r"[-+<$]?\d")
_NO_NUMBER = {"-", "unknown", "not recorded"}

Figure = Union[str, Path, tuple[str, bytes]]  # a file, or (file name, its bytes) for figures drawn in memory


def inline(text: object) -> Markup:
    """A paragraph or cell of report.md as HTML: escaped, `code` spans as <code>."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick stays a backtick
        parts[-2:] = [parts[-2] + "`" + parts[-1]]
    return Markup("").join(Markup("<code>{}</code>").format(p) if i % 2 else escape(p) for i, p in enumerate(parts))


def _table(t: Table) -> dict:
    """A table of report.sections(), its columns of numbers marked (right-aligned), and those of names."""
    numeric = [h not in TEXT_COLUMNS and any(_DIGITS.match(row[i]) for row in t.rows)
               and all(_DIGITS.match(row[i]) or row[i] in _NO_NUMBER for row in t.rows) for i, h in enumerate(t.header)]
    classes = ["num" if n else "name" if h in NAME_COLUMNS else "" for n, h in zip(numeric, t.header)]
    return {"kind": "table", "header": t.header, "rows": t.rows, "classes": classes}


def _figure(fig: Figure) -> dict:
    name, raw = (fig[0], fig[1]) if isinstance(fig, tuple) else (Path(fig).name, Path(fig).read_bytes())
    stem, suffix = Path(name).stem, Path(name).suffix.lower()
    where, caption = CAPTIONS.get(stem, ("figures", ""))
    return {"name": stem, "where": where, "caption": caption,
            "uri": f"data:{MIME.get(suffix, 'application/octet-stream')};base64,{base64.b64encode(raw).decode()}"}


def _value(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if len(text) > SETTING_CHARS:
        return f"{text[:SETTING_CHARS]}… ({len(text):,} characters; in full in report.json, runs)"
    return text


def settings_table(data: dict) -> dict:
    """One row per setting, one column per run; rows whose value differs between runs are marked."""
    runs = data.get("runs") or []
    keys = list(dict.fromkeys(k for r in runs for k in r["settings"]))
    rows = []
    for k in keys:
        values = [r["settings"].get(k) for r in runs]
        shown = [_value(v) if k in r["settings"] else "" for r, v in zip(runs, values)]
        differs = len(runs) > 1 and len({json.dumps(v, sort_keys=True) for v in values}) > 1
        rows.append({"key": k, "values": shown, "differs": differs})
    return {"runs": [r["run"] for r in runs], "rows": rows}


def _score(m: Optional[dict]) -> tuple[str, str]:
    """An item's cell for one mode, and its class."""
    if not m or not m["samples"]:
        return "-", "none"
    if m["score"] is None:
        return ("error", "none") if m["errors"] == m["samples"] else ("unscored", "none")
    s = m["score"]
    text = f"{s:.0f}" if s in (0.0, 1.0) else f"{s:.2f}"
    scored = m["samples"] - m["errors"]
    if scored > 1:
        text += f" ({scored})"
    return text, "right" if s == 1 else "wrong" if s == 0 else "partial"


def items_table(data: dict, limit: int) -> Optional[dict]:
    items = data.get("items") or []
    if not items:
        return None
    modes = sorted({m for row in items for m in row["modes"]}, key=lambda m: (m != "sandbox", m != "llm", m))
    diff = "sandbox" in modes and "llm" in modes
    several = len({row["run"] for row in items}) > 1
    rows = []
    for row in items[:limit]:
        cells = [_score(row["modes"].get(m)) for m in modes]
        d = ""
        if diff:
            s, p = (row["modes"].get(m, {}).get("score") for m in ("sandbox", "llm"))
            d = "-" if s is None or p is None else "0" if s == p else f"{s - p:+.2f}".replace(".00", "")
        rows.append({"run": row["run"], "task": row["task"], "id": row["id"], "cells": cells, "diff": d})
    return {"modes": modes, "diff": diff, "several_runs": several, "rows": rows, "total": len(items),
            "limit": limit}


def render_report_html(data: dict, figures: Iterable[Figure] = (), run_dirs: Optional[list] = None,
                       item_limit: int = ITEM_LIMIT) -> str:
    """The report as one HTML page. `data`: report.json's content (report.analyse()); `figures`: the figure files
    (or (name, bytes) pairs); `run_dirs`: the folders as given (default: those in data)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(loader=PackageLoader("insandbox.bench", "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["inline"] = inline
    sections_ = ("runs", "accuracy", "paired", "choice_extractions", "capabilities", "tokens", "token_ratio", "cost",
                 "time", "poolable", "items", "warnings")
    data = {**dict.fromkeys(sections_, []), **data}  # a report.json of an older version lacks some
    if run_dirs is None:
        run_dirs = [f for r in data.get("runs") or [] for f in r["folders"]]
    parts: list[Section] = sections(data, runs_always=True)
    figs = [_figure(f) for f in figures]
    anchors = {s.anchor for s in parts}
    for f in figs:  # a figure whose section is absent (no table to sit by) goes with the others at the end
        if f["where"] not in anchors:
            f["where"] = "figures"
    page = [{"title": s.title, "anchor": s.anchor,
             "blocks": [_table(b) if isinstance(b, Table) else {"kind": "alert", "text": b.text}
                        if isinstance(b, Alert) else {"kind": "p", "text": b} for b in s.blocks],
             "figures": [f for f in figs if f["where"] == s.anchor]} for s in parts]
    labels = list(dict.fromkeys(r["run"] for r in data.get("runs") or []))
    return env.get_template("report.html.j2").render(
        sections=page, run_dirs=[str(d) for d in run_dirs], labels=labels,
        tasks=list(dict.fromkeys(a["task"] for a in data.get("accuracy") or [])),
        settings=settings_table(data), other_figures=[f for f in figs if f["where"] == "figures"],
        items=items_table(data, item_limit))
