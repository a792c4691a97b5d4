"""execute_bash: one command in the sandbox's persistent shell."""
from __future__ import annotations

from typing import Any

from ..core import defaults
from ..sandbox.base import CommandResult, Sandbox
from .base import ToolOutput, function_schema, require_str

NAME = "execute_bash"


class ExecuteBash:
    name = NAME

    def __init__(self, timeout: float = defaults.COMMAND_TIMEOUT_S):
        self.timeout = timeout

    def schema(self) -> dict:
        return function_schema(
            NAME,
            "Run a bash command in the sandbox and get its output (stdout and stderr together) and exit "
            "code. The shell persists between calls: the working directory, exported variables and "
            "functions carry over, as in a terminal. Commands get no input (stdin is empty), so use "
            "non-interactive flags (e.g. `apt-get -y`). A command running longer than "
            f"{self.timeout:g} seconds is killed together with every process it started; start long jobs "
            "in the background with output to a file. Long outputs are cut in the middle: redirect to a "
            "file and read it with head, tail or grep.",
            {"command": {"type": "string", "description": "The bash command to run; may span several lines."}},
            ["command"])

    async def run(self, sandbox: Sandbox, args: dict[str, Any]) -> ToolOutput:
        command = require_str(args, "command")
        if not command.strip():
            return ToolOutput("Error: `command` is empty.", error=True)
        result = await sandbox.run(command, timeout=self.timeout)
        return ToolOutput(render(result, self.timeout), exit_code=result.exit_code, timed_out=result.timed_out,
                          total_chars=result.total_chars,
                          meta={"cut_chars": result.cut_chars, "duration_s": result.duration_s,
                                "shell_restarted": result.shell_restarted,
                                "streams_restored": result.streams_restored, "oom_kills": result.oom_kills,
                                **({"kill_checked": result.kill_checked, "survivors": result.survivors}
                                   if result.timed_out else {})})


def timeout_note(r: CommandResult, timeout: float) -> str:
    """What the model is told of a timed-out command: "killed" only where this machine saw it so."""
    if r.survivors:
        what = "a process" if r.survivors == 1 else f"{r.survivors} processes"
        return (f"[timed out after {timeout:g} s: the command was stopped, but {what} it started could not be "
                "killed and may still be running]")
    if r.kill_checked:
        return f"[timed out after {timeout:g} s: the command and every process it started were killed]"
    return (f"[timed out after {timeout:g} s: the command was stopped and every process it started was sent a "
            "kill signal]")


def render(r: CommandResult, timeout: float) -> str:
    """The observation the model reads: output (clipped in the middle), then status lines."""
    parts = [r.output]
    if r.cut_chars:
        parts.append(f"\n[... {r.cut_chars:,} characters cut from the middle of the output "
                     f"({r.total_chars:,} in all); redirect it to a file and use head, tail or grep to "
                     "see more ...]\n")
        parts.append(r.output_tail)
    text = "".join(parts)
    if not text:
        text = "(no output)\n"
    elif not text.endswith("\n"):
        text += "\n"
    notes = []
    if r.timed_out:
        notes.append(timeout_note(r, timeout))
    if r.shell_exited:
        notes.append(f"[the command ended the shell; a new shell was started in {r.cwd} with the exported "
                     "variables and functions restored]")
    elif r.shell_restarted:
        notes.append(f"[the shell had to be restarted; it is back in {r.cwd} with the exported variables and "
                     "functions restored, other shell state is lost]")
    if r.oom_kills:
        what = "a process" if r.oom_kills == 1 else f"{r.oom_kills} processes"
        notes.append(f"[killed: out of memory: the kernel killed {what} of this command for going over the "
                     "sandbox's memory limit; use less memory (smaller chunks, streaming) or free some]")
    if r.streams_restored:
        notes.append("[the command closed or redirected the shell's own stdout/stderr; they were pointed back "
                     "at this terminal, so later commands show their output again]")
    if r.exit_code is not None:
        notes.append(f"[exit code: {r.exit_code}]")
    return text + "\n".join(notes)
