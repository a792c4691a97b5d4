"""submit: the model says it is done. The answer itself is read from the sandbox
(answer.txt, the output folder), not from the call."""
from __future__ import annotations

from typing import Any

from ..sandbox.base import Sandbox
from .base import ToolOutput, function_schema

NAME = "submit"


class Submit:
    name = NAME

    def schema(self) -> dict:
        return function_schema(
            NAME, "Finish the task. Call it once the answer file and any outputs are written; nothing runs after it.",
            {}, [])

    async def run(self, sandbox: Sandbox, args: dict[str, Any]) -> ToolOutput:
        return ToolOutput("Submitted.", submitted=True)
