"""A benchmark report's files: report.json, report.md, figures and report.html (report.py analyses and
writes the text, report_html.py the page)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from .report import analyse, load_units, markdown
from .report_html import render_report_html


def write_report(run_dirs: list[Path], out_dir: Optional[Path] = None, plots: bool = True,
                 pool: bool = False) -> tuple[Path, dict]:
    """report.md, report.json, figures and report.html for these runs, compared side by side (`pool`: runs of one
    task and model with identical settings pooled; a ValueError when their settings differ)."""
    run_dirs = [Path(d) for d in run_dirs]
    units, groups = load_units(run_dirs, pool)
    if not groups:
        raise ValueError("no finished samples in these runs")
    data = analyse(groups, units)
    out = Path(out_dir) if out_dir else run_dirs[0] / "report"
    out.mkdir(parents=True, exist_ok=True)
    figures = []
    if plots:
        from ..analysis import plots as P

        figures = P.all_figures(data, out)
    (out / "report.json").write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    (out / "report.md").write_text(markdown(data, run_dirs, figures), encoding="utf-8")
    (out / "report.html").write_text(render_report_html(data, figures, run_dirs), encoding="utf-8")
    return out, data
