"""What reaches the operator's terminal: pure tests on a console writing to memory, and real runs whose
console goes to a pipe and to a terminal (a pseudo-terminal)."""
from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

from rich.console import Console

from insandbox.cli.console import RichView, escape_controls, shown
from insandbox.core.episode import ExitReason
from insandbox.core.trajectory import SkippedOutput, StepRecord, ToolCallRecord, Trajectory
from insandbox.runs.session import RunResult
from tests.helpers import cli

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


def test_lone_surrogates_are_written_out_never_raised():
    """Regression: "\\ud800" is valid JSON but no character; escaping it raised UnicodeEncodeError."""
    assert escape_controls("echo \ud800 \udfff") == "echo \\ud800 \\udfff"
    assert escape_controls("\ud83d\ude00") == "\\ud83d\\ude00"  # a pair left as two code points: no character
    assert escape_controls("name\udc80\udcff") == "name\\x80\\xff"  # bytes os.fsdecode could not decode
    assert shown("[b]\ud800") == "\\[b]\\ud800"
    for text in ("\ud800", "\udbff\udc00x", "\udcff\x1b\ud800"):
        shown(text).encode("utf-8")  # what is shown can be written by any UTF-8 terminal or pipe


def test_a_step_whose_call_holds_a_lone_surrogate_is_shown():
    view, out = _view()
    traj = Trajectory(run_id="r")
    call = ToolCallRecord(id="a", name="execute_bash", arguments='{"command": "echo \\ud800"}', error=True,
                          output="error: the arguments hold U+D800")
    view.on_step(StepRecord(index=1, started_at=0, content="look \ud800", reasoning="hm \udfff",
                            tool_calls=[call]), traj)
    text = out.getvalue()
    assert "$ echo \\ud800" in text and "look \\ud800" in text and "hm \\udfff" in text
    assert "could not show" not in text


def test_a_view_that_cannot_show_a_step_says_so_and_the_run_goes_on():
    """Whatever goes wrong in the view, the hook returns: the loop calls it, and an exception there would
    end the run as internal_error."""
    view, out = _view()
    step = StepRecord(index=1, started_at=0, tool_calls=[ToolCallRecord(id="a", name="x", arguments="{}")])
    step.tool_calls[0].arguments = None  # what a view cannot render
    view.on_step(step, Trajectory(run_id="r"))
    assert "insandbox: the console could not show this (on_step): TypeError" in out.getvalue()


def _surrogate_server(scripted):
    return scripted({"turns": [
        {"tool": "execute_bash", "args": '{"command": "echo \\ud800"}'},  # valid JSON, no character
        {"tool": "execute_bash", "args": {"command": "echo still here"}},
        {"tool": "submit"}]})


def _check_surrogate_run(out: str, run_dir: Path) -> None:
    """The console showed every step, the call was refused as a tool error, and the run went on to submit."""
    assert "internal_error" not in out and "could not show" not in out, out
    assert "$ echo \\ud800" in out
    assert "still here" in out and "submitted" in out
    t = Trajectory.load(run_dir / "trajectory.json")
    assert t.exit_reason == "submitted" and len(t.steps) == 3
    refused = t.steps[0].tool_calls[0]
    assert refused.error and "U+D800" in refused.output and "Nothing was run" in refused.output


def test_a_lone_surrogate_in_a_call_is_shown_on_a_pipe_and_the_run_goes_on(scripted, docker_image, tmp_path):
    """Regression: the console printed the call before the tool layer refused it, and the escaping raised:
    the run ended internal_error. The regression test of the tool layer ran with -q, so it passed."""
    srv = _surrogate_server(scripted)
    r = cli("run", "Print it.", "--base-url", srv.url, "--model", "m", "--image", docker_image,
            "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr[-2000:]
    _check_surrogate_run(r.stdout, tmp_path / "run")


def test_a_lone_surrogate_in_a_call_is_shown_on_a_terminal_and_the_run_goes_on(scripted, docker_image, tmp_path):
    srv = _surrogate_server(scripted)
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))  # 200 columns: nothing wraps
    exe = Path(sys.executable).parent / "insandbox"
    proc = subprocess.Popen([str(exe), "run", "Print it.", "--base-url", srv.url, "--model", "m", "--image",
                             docker_image, "--out", str(tmp_path / "run")],
                            stdin=subprocess.DEVNULL, stdout=child, stderr=child,
                            env={**os.environ, "TERM": "xterm-256color"})
    os.close(child)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the terminal's other end is closed, the run is over
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    assert proc.wait(timeout=300) == 0
    out = b"".join(chunks).decode("utf-8")  # a terminal gets UTF-8 only: no surrogate reached it
    assert "\x1b[" in out  # it was a terminal: rich styled its output
    _check_surrogate_run(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out), tmp_path / "run")


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
