"""The benchmark's progress bar: done/total, accuracy so far, errors, tokens, cost, ETA.

The ETA comes from the durations of this session's samples (eta.py), not from rich's recent
speed, which counts samples done by an earlier session and jumps with each finish."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from ..core.text import shown
from ..models.pricing import usd
from . import degraded
from .eta import SessionEta, format_eta
from .runner import BenchProgress

# redraws of the bar a second (rich's default is 10): each one renders the whole bar, ~1 ms of CPU
# taken from the runner's thread (the GIL); a sample's end redraws nothing by itself
REFRESH_PER_S = 2


class EtaColumn(ProgressColumn):
    def __init__(self, eta: SessionEta):
        super().__init__()
        self.eta = eta

    def render(self, task) -> Text:
        return Text(format_eta(self.eta.estimate(time.monotonic())), style="progress.remaining")


class RichBenchProgress(BenchProgress):
    def __init__(self, console: Optional[Console] = None, label: str = ""):
        self.console = console or Console(highlight=False)
        self.label = label
        self.progress: Optional[Progress] = None
        self.bar = None
        self.eta: Optional[SessionEta] = None
        self.scores: dict[str, list[float]] = {}
        self.tokens = 0
        self.cost: Optional[float] = None  # this session's; None until a sample has a known cost
        self.errors = 0
        self.no_tool_call = 0  # sandbox samples that made no tool call (bench/degraded.py)

    def on_status(self, text: str) -> None:
        if text.startswith("warning:"):  # the run may not measure what it should: not to be missed
            self.console.print(f"[yellow]{shown(text)}[/yellow]")
        else:
            self.console.print(f"[dim]· {shown(text)}[/dim]")

    def on_progress(self, text: str) -> None:
        pass  # image build lines: the bar is not up yet; on_status says what happens

    def on_start(self, total: int, already_done: int, run_dir: Path, concurrency: int) -> None:
        self.console.print(f"run folder: {shown(run_dir)}" +
                           (f" ({already_done} of {total} samples already done)" if already_done else ""))
        self.eta = SessionEta(todo=total - already_done, concurrency=concurrency)
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[acc]}"), TextColumn("{task.fields[tok]}"),
                                 TimeElapsedColumn(), EtaColumn(self.eta), console=self.console, transient=False,
                                 refresh_per_second=REFRESH_PER_S)
        self.progress.start()
        self.bar = self.progress.add_task(self.label or "bench", total=total, completed=already_done,
                                          acc="", tok="")

    def on_sample_start(self, row_id: str, mode: str, repeat: int) -> None:
        if self.eta is not None:
            self.eta.start((row_id, mode, repeat), time.monotonic())

    def on_sample(self, record: dict) -> None:
        if self.eta is not None:
            self.eta.finish((record["id"], record["mode"], record["repeat"]), time.monotonic())
        if record.get("error"):
            self.errors += 1
        if degraded.counted([record]) and record["tool_calls"] == 0:
            self.no_tool_call += 1
        elif record.get("score") is not None:
            self.scores.setdefault(record["mode"], []).append(float(record["score"]))
        self.tokens += (record.get("prompt_tokens") or 0) + (record.get("completion_tokens") or 0)
        if record.get("cost_usd") is not None:
            self.cost = (self.cost or 0.0) + record["cost_usd"] + (record.get("retry_cost_usd") or 0.0)
        tok = f"{self.tokens / 1e3:,.0f}k tok" + (f" {usd(self.cost)}" if self.cost is not None else "")
        acc = " ".join(f"{m} {sum(v) / len(v):.1%}" for m, v in sorted(self.scores.items()) if v)
        if self.errors:
            acc += f" [red]{self.errors} errors[/red]"
        if self.no_tool_call:
            acc += f" [yellow]{self.no_tool_call} without a tool call[/yellow]"
        if self.progress is not None:
            self.progress.update(self.bar, advance=1, acc=acc, tok=tok)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
