"""The oracle agent: runs a task's own `solution/solve.sh`, then submits. A task set whose oracle does
not score full marks has a broken task (its environment, its solution or its verifier).

It is a model client like any other, so the oracle's samples go through the same loop, sandboxes,
verifier, records and report as a model's; it asks no server. The solution folder is uploaded to
/solution as the task's input (never part of the image: the model's agent never sees it).
"""
from __future__ import annotations

import json
import shlex
from typing import Optional

from ...models.base import ModelReply, Usage
from ...tools.base import ToolCall

NAME = "oracle"
SOLUTION_DIR = "/solution"


class OracleClient:
    """First reply: `bash /solution/solve.sh` (from the working folder); then `submit`."""

    name = NAME

    async def complete(self, messages: list[dict], tools: Optional[list[dict]] = None) -> ModelReply:
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if turn == 0:
            call = ToolCall(id="oracle-1", name="execute_bash",
                            arguments=json.dumps({"command": f"bash {shlex.quote(SOLUTION_DIR + '/solve.sh')}"}))
        else:
            call = ToolCall(id=f"oracle-{turn + 1}", name="submit", arguments="{}")
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}]}
        return ModelReply(content=None, tool_calls=[call], message=message, usage=Usage(reported=False),
                          finish_reason="tool_calls")

    async def close(self) -> None:
        return None
