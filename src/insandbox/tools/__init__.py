"""The model's tools. `ToolBox` turns one model tool call into one observation,
whatever the model sent.

`ToolBox.call` is the one place where errors the model caused become tool errors: bad
JSON (nested too deep, NaN, a key twice included: core/model_json.py), a call the model
client refused (cut at max_tokens before its arguments were complete, or arguments it could
not read), an unknown tool, wrong arguments, text that is not valid Unicode, and any
`OperationError` from the sandbox (a missing file, a FIFO or device where a file was
expected, a path the server cannot open) become an error message the model reads, and
the episode goes on. A `SandboxError` (the sandbox itself is broken) passes through and
ends the episode. It is also where every observation is made fit to send to a model server
(observation.py: no NUL or other control bytes, saying what was replaced)."""
from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Optional

from ..core import defaults, model_json
from ..sandbox.base import OperationError, Sandbox
from .base import Tool, ToolArgumentError, ToolCall, ToolOutput
from .bash import ExecuteBash
from .editor import StrReplaceEditor
from .observation import clean_observation
from .submit import Submit


def default_tools(command_timeout: float = defaults.COMMAND_TIMEOUT_S, workdir: str = defaults.WORKDIR,
                  view_limit_chars: int = defaults.OUTPUT_LIMIT) -> list[Tool]:
    """A fresh set of the three tools (the editor keeps per-episode undo history)."""
    return [ExecuteBash(command_timeout), StrReplaceEditor(workdir, view_limit_chars), Submit()]


def parse_arguments(raw: object) -> dict:
    """Arguments as a dict; raises ToolArgumentError with a readable reason."""
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if not isinstance(raw, str):
        raise ToolArgumentError(f"the arguments must be a JSON object, got {type(raw).__name__}")
    try:  # whatever the text: nesting, NaN, a key twice (core/model_json.py)
        value = model_json.loads(raw)
    except ValueError as e:
        raise ToolArgumentError(f"the arguments are not valid JSON ({e}); send one JSON object") from None
    if isinstance(value, str):  # double-encoded JSON, seen from some servers
        try:
            value = model_json.loads(value)
        except ValueError:
            pass
    if not isinstance(value, dict):
        raise ToolArgumentError(f"the arguments must be a JSON object, got {type(value).__name__}")
    check_unicode(value)
    return value


def check_unicode(value: object, where: str = "") -> None:
    """JSON may carry a lone UTF-16 surrogate ("\\ud800"): valid JSON, but not a character, and it
    has no UTF-8 form to reach a file or a shell. Refuse it with the place it sits."""
    if isinstance(value, str):
        for i, ch in enumerate(value):
            if "\ud800" <= ch <= "\udfff":
                raise ToolArgumentError(
                    f"`{where or 'the arguments'}` holds U+{ord(ch):04X} at character {i}, a lone UTF-16 surrogate: "
                    "it is not a character and cannot be written as UTF-8. Nothing was run; send the text itself")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_unicode(str(key), where or "the argument names")
            check_unicode(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_unicode(item, f"{where}[{i}]")


class ToolBox:
    def __init__(self, tools: Iterable[Tool]):
        self.tools = {t.name: t for t in tools}

    def schemas(self) -> list[dict]:
        return [t.schema() for t in self.tools.values()]

    async def call(self, sandbox: Optional[Sandbox], call: ToolCall) -> tuple[ToolOutput, float]:
        """Run one call; returns its output and the seconds it took."""
        t0 = time.perf_counter()
        tool = self.tools.get(call.name)
        try:
            if call.refused:
                raise ToolArgumentError(call.refused)
            if tool is None:
                raise ToolArgumentError(f"there is no tool named {call.name!r}. Available tools: "
                                        f"{', '.join(self.tools)}")
            out = await tool.run(sandbox, parse_arguments(call.arguments))
        except ToolArgumentError as e:
            out = ToolOutput(f"Error in the call to {call.name}: {e}.", error=True)
        except OperationError as e:
            out = ToolOutput(f"Error: {e}", error=True)
        out.text, removed, replaced = clean_observation(out.text)
        if removed or replaced:
            out.meta["cleaned"] = {"escape_sequences": removed, "replaced_characters": replaced}
        return out, time.perf_counter() - t0


__all__ = ["ExecuteBash", "StrReplaceEditor", "Submit", "Tool", "ToolBox", "ToolCall", "ToolOutput",
           "ToolArgumentError", "check_unicode", "default_tools", "parse_arguments"]
