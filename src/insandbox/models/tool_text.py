"""Tool calls written as text, for servers started without a tool-call parser.

Hermes-style models (Qwen, many fine-tunes) write
    <tool_call>{"name": "execute_bash", "arguments": {"command": "ls"}}</tool_call>
in their content. We read those blocks as calls to run. The turn itself goes back to the
server exactly as written and the results as a user message of <tool_response> blocks
(`tool_response_message`): a server without a tool parser often has a chat template that
ignores structured `tool_calls` and `tool` messages, and the model must see its own calls.
"""
from __future__ import annotations

import json
import re
import uuid
from typing import Optional

from ..tools.base import ToolCall

BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:12]


def parse_text_tool_calls(content: Optional[str]) -> tuple[list[ToolCall], str, list[str]]:
    """Returns (calls, content without the blocks, errors for blocks that did not parse)."""
    if not content or "<tool_call>" not in content:
        return [], content or "", []
    calls, errors = [], []
    for block in BLOCK.findall(content):
        block = block.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
        try:
            obj = json.loads(block)
        except ValueError as e:
            errors.append(f"a <tool_call> block is not valid JSON ({e}): {block[:200]}")
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            errors.append(f'a <tool_call> block needs {{"name": ..., "arguments": {{...}}}}: {block[:200]}')
            continue
        args = obj.get("arguments", obj.get("parameters", {}))
        arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        calls.append(ToolCall(id=new_call_id(), name=obj["name"], arguments=arguments))
    rest = BLOCK.sub("", content).strip()
    return calls, rest, errors


def tool_response_message(outputs: list[str], extra: str = "") -> dict:
    """The results of calls written as text, in the form Hermes-style templates use for them."""
    blocks = "\n".join(f"<tool_response>\n{out}\n</tool_response>" for out in outputs)
    return {"role": "user", "content": blocks + (f"\n{extra}" if extra else "")}
