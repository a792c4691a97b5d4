"""Pure functions: schemas, argument parsing, text tool calls, output clipping, prompts, archives."""
from __future__ import annotations

import json

from insandbox.models.tool_text import parse_text_tool_calls


def test_text_tool_calls_hermes_style():
    content = ('I will list files.\n<tool_call>\n{"name": "execute_bash", "arguments": {"command": "ls"}}\n'
               '</tool_call>\n<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
    calls, rest, errors = parse_text_tool_calls(content)
    assert [c.name for c in calls] == ["execute_bash", "submit"]
    assert json.loads(calls[0].arguments) == {"command": "ls"} and rest == "I will list files." and not errors
    assert len({c.id for c in calls}) == 2
    calls, _, _ = parse_text_tool_calls('<tool_call>{"name": "submit", "parameters": {}}')  # unclosed, Llama keys
    assert calls[0].name == "submit"
    calls, _, errors = parse_text_tool_calls("<tool_call>{oops}</tool_call>")
    assert not calls and "not valid JSON" in errors[0]
    assert parse_text_tool_calls("plain answer") == ([], "plain answer", [])

