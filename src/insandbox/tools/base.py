"""What a tool is: an OpenAI function schema plus an async implementation on a Sandbox."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from ..core.errors import ToolError
from ..sandbox.base import Sandbox


@dataclass
class ToolCall:
    """One call as the model made it. `arguments` stays the raw JSON text."""

    id: str
    name: str
    arguments: str = "{}"
    refused: Optional[str] = None  # why it must not run (set by the model client: cut at max_tokens); told the model


@dataclass
class ToolOutput:
    text: str  # what the model reads back
    error: bool = False  # the call failed (bad arguments, missing file, ...)
    exit_code: Optional[int] = None
    timed_out: bool = False
    submitted: bool = False
    total_chars: int = 0  # size of the raw output before clipping
    meta: dict = field(default_factory=dict)


class ToolArgumentError(ToolError, ValueError):
    """The model's arguments do not fit the tool; the message is shown to the model."""


class Tool(Protocol):
    name: str

    def schema(self) -> dict:
        """The OpenAI function-calling schema ({"type": "function", "function": {...}})."""

    async def run(self, sandbox: Sandbox, args: dict[str, Any]) -> ToolOutput: ...


def function_schema(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required}}}


def require_str(args: dict, key: str, allow_empty: bool = True) -> str:
    value = args.get(key)
    if value is None:
        raise ToolArgumentError(f"missing required argument `{key}`")
    if not isinstance(value, str):
        raise ToolArgumentError(f"`{key}` must be a string, got {type(value).__name__}")
    if not allow_empty and not value:
        raise ToolArgumentError(f"`{key}` must not be empty")
    return value


def as_int(value: Any, key: str) -> int:
    """Accept 5 and "5" (small models often quote numbers)."""
    if isinstance(value, bool):
        raise ToolArgumentError(f"`{key}` must be an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise ToolArgumentError(f"`{key}` must be an integer, got {value!r}")
