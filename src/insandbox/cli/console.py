"""What a person sees on the terminal: one block per step as it happens, a summary at the end.

Every string printed here goes through core/text.py's `shown()` (`escape_controls()` where no rich
markup is involved). What is shown is a view of the run: a step the view cannot show is said to
be so, and the run goes on.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional

from rich.console import Console
from rich.table import Table

from ..core.episode import ExitReason
from ..core.text import PREVIEW_LINES, _clip_lines, describe_call, escape_controls, shown  # noqa: F401
from ..core.trajectory import StepRecord, Trajectory
from ..models.pricing import usd
from ..runs.session import RunObserver, RunResult


def reason_style(reason: Optional[ExitReason]) -> str:
    if reason is None or reason.is_failure:
        return "red"
    return "yellow" if reason.is_limit else "green"


def make_console(stderr: bool = False) -> Console:
    """A console that does not wrap at 80 columns when it writes to a log or a pipe."""
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 200)
    return console


def cost_line(t: Trajectory) -> str:
    """The run's cost and the price it came from; an unknown price is said to be unknown, never $0."""
    price = t.price
    if not price.known:
        return (f"[yellow]unknown[/yellow] [dim]({shown(price.describe())}: add it to a price file, "
                "--prices FILE)[/dim]")
    return f"{usd(t.totals.cost_usd)} [dim]({shown(price.describe())})[/dim]"


def _never_raises(method):
    """A RichView hook that cannot end the run: what it could not show is said on the console instead."""
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception as e:  # the run and its trajectory are what matter; this is only a view of them
            try:
                self.console.print(f"[yellow]insandbox: the console could not show this ({method.__name__}): "
                                   f"{shown(type(e).__name__)}: {shown(e)}; the run goes on, its trajectory "
                                   "has everything[/yellow]")
            except Exception:
                pass
    return guarded


class RichView(RunObserver):
    def __init__(self, console: Optional[Console] = None, show_steps: bool = True, max_steps: Optional[int] = None):
        self.console = console or make_console()
        self.show_steps = show_steps
        self.max_steps = max_steps
        self._spinner = None
        self._streaming: Optional[str] = None  # the kind of text being streamed now ("content", "reasoning")
        self._streamed_steps = 0  # steps whose reply was shown as it came

    @_never_raises
    def on_delta(self, kind: str, text: str) -> None:
        """A piece of a streamed reply: shown at once, reasoning apart from the text."""
        if not self.show_steps:
            return
        self._stop_spinner()
        if self._streaming is None:
            self._streamed_steps += 1
            self.console.print(f"[blue]──[/blue] [bold]step {self._streamed_steps}[/bold] [dim]streaming[/dim]")
        if kind != self._streaming and self._streaming is not None:
            self.console.print()
        if kind != self._streaming and kind == "reasoning":
            self.console.print("[magenta dim]thinking: [/]", end="")
        self._streaming = kind
        self.console.print(shown(text), end="", style="magenta dim" if kind == "reasoning" else "dim",
                           markup=False, highlight=False, soft_wrap=True)

    @_never_raises
    def on_status(self, text: str) -> None:
        """A lasting message (e.g. 'building the image')."""
        self._stop_spinner()
        self.console.print(f"[dim]· {shown(text)}[/dim]")

    @_never_raises
    def on_progress(self, text: str) -> None:
        """A transient line under a spinner (e.g. the image build's current step)."""
        if self._spinner is None:
            self._spinner = self.console.status("", spinner="dots")
            self._spinner.start()
        self._spinner.update(shown(text[:150]))

    def _stop_spinner(self) -> None:
        if self._spinner is not None:
            self._spinner.stop()
            self._spinner = None

    @_never_raises
    def on_start(self, traj: Trajectory, run_dir: Path) -> None:
        self._stop_spinner()
        c = traj.config
        where = f" @ {c.get('base_url')}" if c.get("base_url") else ""
        if c.get("base_url") == "embedded":
            where = " (embedded local model)"
        image = f" · image {shown(c.get('image'))}" if traj.mode == "sandbox" else ""
        self.console.print(f"[bold]insandbox[/bold] · {traj.mode} mode · model [cyan]{shown(c.get('model'))}"
                           f"[/cyan]{shown(where)}{image}")
        self.console.print(f"run folder: {shown(run_dir)}")
        lines, more = _clip_lines(traj.task.get("prompt", ""), 4)
        self.console.print("[bold]task:[/bold] " + shown("\n      ".join(lines)) + (" …" if more else ""))

    @_never_raises
    def on_step(self, step: StepRecord, traj: Trajectory) -> None:
        if not self.show_steps:
            return
        total = f"/{self.max_steps}" if self.max_steps else ""
        tokens = f"{step.prompt_tokens:,}→{step.completion_tokens:,} tok"
        if step.cost_usd:
            tokens += f" · {usd(step.cost_usd)}"
        streamed, self._streaming = self._streaming is not None, None
        self._streamed_steps = step.index
        if streamed:
            self.console.print()
        ttft = f" · first token {step.time_to_first_token_s:.2f}s" if step.time_to_first_token_s is not None else ""
        self.console.print(f"[blue]──[/blue] [bold]step {step.index}{total}[/bold] · "
                           f"model {step.model_latency_s:.2f}s{ttft} · {tokens} [blue]──[/blue]")
        if step.reasoning and step.reasoning.strip() and not streamed:  # a streamed one was shown as it came
            lines, more = _clip_lines(step.reasoning.strip(), 2)
            self.console.print("[magenta dim]thinking: " + shown(" ".join(lines)) + (" …" if more else "") + "[/]")
        if step.content and step.content.strip() and not streamed:
            lines, more = _clip_lines(step.content.strip(), 3)
            self.console.print("[dim]" + shown("\n".join(lines)) + (" …" if more else "") + "[/dim]")
        if step.nudged:
            self.console.print(f"[yellow]nudged: {shown(step.nudge_reason or 'no tool call')}[/yellow]")
        for note in step.notes:
            if note.startswith("hint:"):
                self.console.print(f"[yellow]{shown(note)}[/yellow]")
        for call in step.tool_calls:
            self.console.print(f"[bold]{shown(describe_call(call))}[/bold]")
            if call.name == "submit" and not call.error:
                continue
            output = call.output
            if call.exit_code is not None:  # the status line is shown below anyway
                output = output.rsplit("\n[exit code:", 1)[0]
            lines, more = _clip_lines(output)
            for ln in lines:
                self.console.print("  │ " + shown(ln), style="red" if call.error else None)
            if more:
                self.console.print(f"  │ [dim]… {more} more lines[/dim]")
            status = f"exit {call.exit_code}" if call.exit_code is not None else ("error" if call.error else "ok")
            if call.timed_out:
                status = "timed out"
            self.console.print(f"  └ [dim]{status} · {call.duration_s:.2f}s[/dim]")

    @_never_raises
    def on_end(self, result: RunResult) -> None:
        t = result.trajectory
        tot = t.totals
        table = Table(show_header=False, box=None, padding=(0, 2))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")  # paths wrap, never get cut
        style = reason_style(t.exit_reason)
        table.add_row("exit reason", f"[{style}]{t.exit_reason}[/{style}]" +
                      (f" [dim]({shown(t.exit_detail)})[/dim]" if t.exit_detail else ""))
        failed = f", {tot.failed_requests} failed model request(s)" if tot.failed_requests else ""
        table.add_row("steps", f"{tot.steps} ({tot.tool_calls} tool calls{failed})")
        table.add_row("tokens", f"{tot.prompt_tokens:,} prompt · {tot.completion_tokens:,} completion")
        if t.price is not None:
            table.add_row("cost", cost_line(t))
        table.add_row("time", f"{tot.wall_time_s:.1f}s wall · {tot.model_time_s:.1f}s model · "
                              f"{tot.tool_time_s:.1f}s tools")
        table.add_row("trajectory", shown(result.run_dir / "trajectory.json"))
        if result.files:
            table.add_row("files", shown(f"{result.run_dir / 'files'} ({len(result.files)}: "
                                         f"{', '.join(result.files[:5])}{' …' if len(result.files) > 5 else ''})"))
        if t.output_skipped:
            lines = [f"{s.path}: {s.reason}" for s in t.output_skipped[:8]]
            more = f"\n… {len(t.output_skipped) - 8} more (trajectory.json: output_skipped)" \
                if len(t.output_skipped) > 8 else ""
            table.add_row("[yellow]not copied[/yellow]", shown("\n".join(lines)) + more)
        if result.answer is not None:
            lines, more = _clip_lines(result.answer.strip(), 6)
            table.add_row("answer", shown("\n".join(lines)) + (" …" if more else ""))
        table.add_row("view", shown(f"insandbox view {result.run_dir}"))
        self.console.print("[blue]" + "─" * 60 + "[/blue]")
        self.console.print(table)
