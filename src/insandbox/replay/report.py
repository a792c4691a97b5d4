"""How a replay report is shown: a rich table of the calls, the diffs of those that differ, a summary."""
from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .replayer import ReplayReport

DIFFS_SHOWN = 5  # diffs printed under the table; the JSON report has all of them


def _arguments(tool: str, raw: str) -> str:
    """What a call did, on one line (the command, the editor operation), control characters escaped."""
    from ..core.text import describe_call, escape_controls
    from ..core.trajectory import ToolCallRecord

    text = " ".join(describe_call(ToolCallRecord(id="", name=tool, arguments=raw)).split())
    return escape_controls(text if len(text) <= 70 else text[:67] + "...")


def print_report(report: ReplayReport, console: Console) -> None:
    from ..core.text import escape_controls

    table = Table(title=f"replay of {report.run_dir}", title_justify="left")
    for col in ("step", "call", "tool", "arguments", "observation"):
        table.add_column(col, justify="right" if col in ("step", "call") else "left")
    for c in report.comparisons:
        mark = Text("same", style="green") if c.status == "same" else Text("differs", style="bold red")
        table.add_row(str(c.step), str(c.call), c.tool, Text(_arguments(c.tool, c.arguments)), mark)
    console.print(table)
    shown = [c for c in report.comparisons if c.status != "same"][:DIFFS_SHOWN]
    for c in shown:
        console.print(Text(f"step {c.step}, call {c.call} ({c.tool}):", style="bold"))
        console.print(Text(escape_controls(c.diff)))
    if report.differing > len(shown):
        console.print(f"... {report.differing - len(shown)} more differing calls (--json FILE has every diff)")
    for note in report.notes:
        console.print(Text(f"note: {escape_controls(note)}", style="yellow"))
    if report.ignore:
        console.print(f"ignored (replaced in both before comparing): {', '.join(map(repr, report.ignore))}")
    first = report.first_divergence
    console.print(Text(
        f"{report.steps_replayed} of {report.steps_recorded} steps replayed, {report.calls} calls: "
        f"{report.identical} identical, {report.differing} differ; first divergence: "
        + (f"step {first['step']}, call {first['call']} ({first['tool']})" if first else "none"),
        style="bold"))
    if report.stopped:
        console.print(Text(f"stopped early: {report.stopped}", style="bold red"))


def write_json(report: ReplayReport, path: Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(report.to_dict(), indent=1, ensure_ascii=False), encoding="utf-8")
