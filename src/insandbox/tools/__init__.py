"""The model's tools. `ToolBox` turns one model tool call into one observation,
whatever the model sent: bad JSON, an unknown tool or wrong arguments become an error
message the model can read, never an exception in the loop."""
from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Optional

from ..sandbox.base import Sandbox
from .base import Tool, ToolArgumentError, ToolCall, ToolOutput
from .bash import ExecuteBash
from .editor import StrReplaceEditor
from .submit import Submit


def default_tools(command_timeout: float = 120.0, workdir: str = "/testbed",
                  view_limit_chars: int = 16000) -> list[Tool]:
    return [ExecuteBash(command_timeout), StrReplaceEditor(workdir, view_limit_chars), Submit()]


def parse_arguments(raw: object) -> dict:
    """Arguments as a dict; raises ToolArgumentError with a readable reason."""
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    try:
        value = json.loads(raw)
    except (TypeError, ValueError) as e:
        raise ToolArgumentError(f"the arguments are not valid JSON ({e}); send one JSON object") from None
    if isinstance(value, str):  # double-encoded JSON, seen from some servers
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if not isinstance(value, dict):
        raise ToolArgumentError(f"the arguments must be a JSON object, got {type(value).__name__}")
    return value


class ToolBox:
    def __init__(self, tools: Iterable[Tool]):
        self.tools = {t.name: t for t in tools}

    def schemas(self) -> list[dict]:
        return [t.schema() for t in self.tools.values()]

    async def call(self, sandbox: Optional[Sandbox], call: ToolCall) -> tuple[ToolOutput, float]:
        """Run one call; returns its output and the seconds it took."""
        t0 = time.perf_counter()
        tool = self.tools.get(call.name)
        if tool is None:
            out = ToolOutput(f"Error: there is no tool named {call.name!r}. Available tools: "
                             f"{', '.join(self.tools)}.", error=True)
            return out, time.perf_counter() - t0
        try:
            out = await tool.run(sandbox, parse_arguments(call.arguments))
        except ToolArgumentError as e:
            out = ToolOutput(f"Error in the call to {call.name}: {e}.", error=True)
        return out, time.perf_counter() - t0


__all__ = ["ExecuteBash", "StrReplaceEditor", "Submit", "Tool", "ToolBox", "ToolCall", "ToolOutput",
           "ToolArgumentError", "default_tools", "parse_arguments"]
