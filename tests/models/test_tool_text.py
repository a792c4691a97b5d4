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



def test_qwen3_coder_xml_calls():
    content = ("Looking.\n<tool_call>\n<function=execute_bash>\n<parameter=command>\nls -la /testbed\n</parameter>\n"
               "</function>\n</tool_call>\n<tool_call><function=str_replace_editor><parameter=command>view"
               "</parameter><parameter=path>/testbed/a.py</parameter><parameter=view_range>[1, 20]</parameter>"
               "</function></tool_call>")
    calls, rest, errors = parse_text_tool_calls(content)
    assert not errors and rest == "Looking."
    assert [c.name for c in calls] == ["execute_bash", "str_replace_editor"]
    assert json.loads(calls[0].arguments) == {"command": "ls -la /testbed"}
    assert json.loads(calls[1].arguments) == {"command": "view", "path": "/testbed/a.py", "view_range": [1, 20]}
    calls, _, errors = parse_text_tool_calls("<tool_call><function=>ls</function></tool_call>")
    assert not calls and "with <function=...> could not be read" in errors[0]


def test_bare_json_calls():
    calls, rest, errors = parse_text_tool_calls('{"name": "execute_bash", "arguments": {"command": "pwd"}}')
    assert [c.name for c in calls] == ["execute_bash"] and rest == "" and not errors
    calls, _, _ = parse_text_tool_calls('```json\n[{"name": "submit", "arguments": {}}, '
                                        '{"name": "execute_bash", "arguments": {"command": "ls"}}]\n```')
    assert [c.name for c in calls] == ["submit", "execute_bash"]
    calls, rest, errors = parse_text_tool_calls('{"name": "execute_bash", "arguments": {"command": "pwd"')
    assert not calls and "looks like a tool call but is not valid JSON" in errors[0]
    assert parse_text_tool_calls('{"answer": 42}') == ([], '{"answer": 42}', [])  # JSON, but no call
    assert parse_text_tool_calls("The answer is {x}.") == ([], "The answer is {x}.", [])


def test_the_tools_go_into_the_system_prompt_and_a_call_written_as_shown_parses():
    from insandbox.models.tool_text import with_tools_in_prompt

    tools = [{"type": "function", "function": {"name": "execute_bash", "description": "run a command",
                                               "parameters": {"type": "object",
                                                              "properties": {"command": {"type": "string"}}}}}]
    sent = with_tools_in_prompt([{"role": "system", "content": "Be careful."}, {"role": "user", "content": "go"}],
                                tools)
    assert sent[0]["content"].startswith("Be careful.\n\n# Tools") and sent[1] == {"role": "user", "content": "go"}
    assert '"description": "run a command"' in sent[0]["content"]
    example = sent[0]["content"].split("for example:\n", 1)[1].split("\nYou may", 1)[0]
    calls, rest, errors = parse_text_tool_calls(example)
    assert [c.name for c in calls] == ["execute_bash"] and not errors and rest == ""
    bare = with_tools_in_prompt([{"role": "user", "content": "go"}], tools)
    assert bare[0]["role"] == "system" and bare[0]["content"].startswith("# Tools")
