"""Sandbox-mode samples in which the model made no tool call, and the warning when they are most of them.

A server whose chat template drops the tools (or a model that never writes a call the client can read)
still gives every sandbox sample a score: the score of a model that never had a computer. Nothing else
in the results shows it, so the benchmark counts such samples per task and mode (summary.json, the
report, the viewer) and warns, during the run once it is clear and at its end, when they are most of
a task's sandbox samples. Counted: the sandbox samples that ran to their end without an infrastructure
error and recorded their tool calls (submit counts as a call; a <tool_call> that could not be read does
not, since nothing ran).
"""
from __future__ import annotations

from typing import Optional

MOST = 0.5  # "most": more than half of the samples counted
EARLY_SAMPLES = 5  # the run warns once this many sandbox samples have finished and most made no call


def counted(records: list[dict]) -> list[dict]:
    """The sandbox samples whose tool use is known: no infrastructure error, tool calls recorded."""
    return [r for r in records if r.get("mode") == "sandbox" and not r.get("error")
            and isinstance(r.get("tool_calls"), int)]


def no_tool_call(records: list[dict]) -> dict:
    """{"no_tool_call": samples without a call, "no_tool_call_of": samples counted, "no_tool_call_share"}."""
    ran = counted(records)
    none = sum(1 for r in ran if r["tool_calls"] == 0)
    return {"no_tool_call": none, "no_tool_call_of": len(ran),
            "no_tool_call_share": round(none / len(ran), 6) if ran else None}


def is_most(none: int, of: int) -> bool:
    return of > 0 and none / of > MOST


def advice(tool_format: Optional[str]) -> str:
    """What to look at, for the tool format the samples ran with."""
    if tool_format == "text":
        return ("With --tool-format text no <tool_call> block was found in their replies: the model may need a "
                "prompt that shows the form (--prompt-config), or --tool-format native on a server that parses "
                "tool calls. A sample's trajectory has the replies.")
    return ("The model server may drop the tools (a chat template or tool parser without tool support): see the "
            "hint in a sample's trajectory, or try --tool-format text.")


def warning(task: str, none: int, of: int, tool_format: Optional[str], so_far: bool = False) -> str:
    when = f" of the first {of}" if so_far else f" of {of}"
    return (f"{task}: {none}{when} sandbox-mode samples made no tool call, so the sandbox-mode score "
            f"measures the model without its tools. {advice(tool_format)}")


def warnings(tasks: dict, tool_format: Optional[str]) -> list[str]:
    """The warnings for a summary's `tasks` (summary.json: task -> mode -> numbers)."""
    out = []
    for task, entry in tasks.items():
        sb = entry.get("sandbox") or {}
        if is_most(sb.get("no_tool_call") or 0, sb.get("no_tool_call_of") or 0):
            out.append(warning(task, sb["no_tool_call"], sb["no_tool_call_of"], tool_format))
    return out
