"""What reaches the operator's terminal (pure: a console writing to memory)."""
from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console

from insandbox.console import RichView, escape_controls
from insandbox.core.episode import ExitReason
from insandbox.core.trajectory import SkippedOutput, StepRecord, ToolCallRecord, Trajectory
from insandbox.runs.session import RunResult

HOSTILE = ("\x1b]52;c;cm0gLXJmIH4=\x07"  # OSC 52: write the operator's clipboard
           "\x1b[2J\x1b[H"  # clear the screen
           "\x1b]0;owned\x07"  # set the window title
           "[bold red]markup[/]\r\n"
           "tab\there \u202eevil")


def _view() -> tuple[RichView, io.StringIO]:
    out = io.StringIO()
    # no colours: every escape sequence in the output would have come from the sandbox
    return RichView(Console(file=out, force_terminal=False, color_system=None, width=200)), out


def test_escape_sequences_from_the_sandbox_are_shown_escaped():
    """Regression: OSC 52 clipboard writes and screen clears reached the operator's terminal."""
    view, out = _view()
    traj = Trajectory(run_id="r", task={"prompt": "t\x1b[2J"}, config={"model": "m\x1b]0;x\x07"})
    view.on_start(traj, Path("/tmp/run"))
    step = StepRecord(index=1, started_at=0, content=HOSTILE, reasoning=HOSTILE, tool_calls=[
        ToolCallRecord(id="a", name="execute_bash", arguments='{"command": "printf \\u001b[2J"}', output=HOSTILE,
                       exit_code=0)])
    view.on_step(step, traj)
    traj.end(ExitReason.SUBMITTED, HOSTILE)
    traj.output_skipped = [SkippedOutput(path="/testbed/output/\x1b[2Jx", reason="FIFO, not a regular file")]
    view.on_end(RunResult(Path("/tmp/run"), traj, answer=HOSTILE, files=["\x1b]52;c;x\x07.txt"]))
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in text and "\\x1b[2J" in text and "\\u202e" in text
    assert "[bold red]markup[/]" in text  # rich markup from the model is text, not style
    assert "tab     here" in text  # a tab is layout (rich expands it), not an escape


def test_nudges_say_why_and_skipped_outputs_are_listed():
    view, out = _view()
    traj = Trajectory(run_id="r")
    view.on_step(StepRecord(index=1, started_at=0, nudged=True,
                            nudge_reason="your tool call could not be read: not valid JSON"), traj)
    traj.end(ExitReason.STUCK, "the same tool calls with the same results 5 times in a row")
    traj.output_skipped = [SkippedOutput(path="/testbed/output/big.bin", reason="too big: 2.0 GiB, over the "
                                                                                "per-file limit of 512.0 MiB")]
    view.on_end(RunResult(Path("/tmp/run"), traj))
    text = out.getvalue()
    assert "nudged: your tool call could not be read: not valid JSON" in text
    assert "stuck" in text and "not copied" in text and "/testbed/output/big.bin: too big: 2.0 GiB" in text


def test_escape_controls_keeps_text_and_names_bytes():
    assert escape_controls("plain ✓ text\n\tok") == "plain ✓ text\n\tok"
    assert escape_controls("a\x00b\x7fc\x9bd") == "a\\x00b\\x7fc\\x9bd"
    assert escape_controls("name\udcff.txt") == "name\\xff.txt"  # a byte that is not UTF-8, shown as such


def test_the_cost_is_shown_per_step_and_at_the_end_and_an_unknown_price_is_said_to_be_unknown():
    from insandbox.models.pricing import Price

    view, out = _view()
    traj = Trajectory(run_id="r")
    traj.set_price(Price(model="gpt-4o", match="exact", entry="gpt-4o", input=2.5, output=10.0, cache_read=1.25,
                         cache_write=2.5))
    step = StepRecord(index=1, started_at=0, prompt_tokens=10_000, completion_tokens=500)
    traj.add_step(step)
    view.on_step(step, traj)
    view.on_end(RunResult(Path("/tmp/run"), traj))
    text = out.getvalue()
    assert "10,000→500 tok · $0.0300" in text  # 10,000 x 2.5 + 500 x 10 per million
    assert re.search(r"cost +\$0\.0300 \(gpt-4o: \$2\.5 in \(\$1\.25 cached\), \$10 out per M tokens\)", text)

    view, out = _view()
    traj = Trajectory(run_id="r")
    traj.set_price(Price(model="my-model", match="unknown"))
    traj.add_step(step := StepRecord(index=1, started_at=0, prompt_tokens=10_000, completion_tokens=500))
    view.on_step(step, traj)
    view.on_end(RunResult(Path("/tmp/run"), traj))
    text = out.getvalue()
    assert re.search(r"cost +unknown \(no price for 'my-model': add it to a price file, --prices FILE\)", text)
    assert "$" not in text


def test_dollars_read_well_at_every_size():
    from insandbox.models.pricing import usd

    assert [usd(x) for x in (None, 0, 0.0303, 0.000123456, 0.5, 1.5, 1234.567)] == [
        "unknown", "$0", "$0.0303", "$0.000123", "$0.500", "$1.50", "$1,234.57"]
