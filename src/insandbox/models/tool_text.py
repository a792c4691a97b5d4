"""Tool calls written as text: by servers started without a tool-call parser, and by a policy
whose tokens we sample ourselves (RL rollouts). Three forms, the same rules and messages for all:

    Hermes (Qwen, many fine-tunes)
        <tool_call>{"name": "execute_bash", "arguments": {"command": "ls"}}</tool_call>
    Qwen3-Coder
        <tool_call><function=execute_bash><parameter=command>ls</parameter></function></tool_call>
    bare JSON (a reply that is nothing but the call, or a list of calls, maybe in a ```json fence)
        {"name": "execute_bash", "arguments": {"command": "ls"}}

The turn itself goes back to the server exactly as written and the results as a user message
of <tool_response> blocks (`tool_response_message`): a server without a tool parser often has a
chat template that ignores structured `tool_calls` and `tool` messages, and the model must see
its own calls.
"""
from __future__ import annotations

import json
import re
import uuid
from typing import Optional

from ..core import model_json
from ..tools.base import ToolCall

# no `\s*` beside a lazy `(.*?)`: on a reply of many spaces that would try every split (quadratic); blocks
# are stripped where they are read
BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
FUNCTION = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|$)", re.DOTALL)
PARAMETER = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?(?:</parameter>|(?=<parameter=)|$)", re.DOTALL)
FENCE = re.compile(r"^```(?:json)?(.*?)```$", re.DOTALL)


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:12]


def parse_text_tool_calls(content: Optional[str]) -> tuple[list[ToolCall], str, list[str]]:
    """Returns (calls, content without the calls, errors for calls that could not be read)."""
    if not content:
        return [], content or "", []
    if "<tool_call>" in content:
        calls, errors = [], []
        for block in BLOCK.findall(content):
            call, error = _read_block(block)
            if call is not None:
                calls.append(call)
            else:
                errors.append(error)
        return calls, BLOCK.sub("", content).strip(), errors
    return _read_bare_json(content)


def last_call_cut(content: str) -> Optional[str]:
    """For a reply cut short: whether its last call written as text was still being written, and
    what reading it gave: "call" (it read as a call anyway), "error" (it could not be read), or
    None (the text ends after a complete call, or holds none)."""
    if "<tool_call>" in content:
        if content.rstrip().endswith("</tool_call>"):
            return None
        block = content[content.rindex("<tool_call>") + len("<tool_call>"):]
        if "</tool_call>" in block:  # the last block closed; text after it
            return None
        return "call" if _read_block(block.strip())[0] is not None else "error"
    calls, _, errors = _read_bare_json(content)
    return "error" if errors and not calls else None


def _read_block(block: str) -> tuple[Optional[ToolCall], str]:
    block = block.strip()
    if block.startswith("<function="):
        return _read_xml_call(block)
    fenced = FENCE.match(block)
    block = fenced.group(1).strip() if fenced else block
    try:
        obj = model_json.loads(block)
    except ValueError as e:
        return None, f"a <tool_call> block is not valid JSON ({e}): {block[:200]}"
    return _call_of(obj, block)


def _call_of(obj: object, text: str) -> tuple[Optional[ToolCall], str]:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None, f'a tool call needs {{"name": ..., "arguments": {{...}}}}: {text[:200]}'
    args = obj.get("arguments", obj.get("parameters", {}))
    arguments = args if isinstance(args, str) else model_json.dumps(args)  # read by model_json: it can be written
    return ToolCall(id=new_call_id(), name=obj["name"], arguments=arguments), ""


def _read_xml_call(block: str) -> tuple[Optional[ToolCall], str]:
    m = FUNCTION.match(block)
    if m is None:
        return None, f"a <tool_call> block with <function=...> could not be read: {block[:200]}"
    args = {name: _xml_value(value) for name, value in PARAMETER.findall(m.group(2))}
    try:
        arguments = model_json.dumps(args)
    except ValueError as e:  # a parameter nested as deep as may be read, one level more here
        return None, f"a <tool_call> block with <function=...> could not be read ({e}): {block[:200]}"
    return ToolCall(id=new_call_id(), name=m.group(1), arguments=arguments), ""


def _xml_value(text: str) -> object:
    """Parameters are text; a JSON number, list or object in one stays what it is (view_range=[1, 20])."""
    stripped = text.strip()
    if stripped[:1] in ("[", "{") or re.fullmatch(r"-?\d+", stripped):
        try:
            return model_json.loads(stripped)
        except ValueError:  # a nest too deep or a key twice included: the text as it is, a string
            pass
    return text


def _read_bare_json(content: str) -> tuple[list[ToolCall], str, list[str]]:
    """A reply that is only a call (or a list of calls) as JSON; anything else is no call."""
    text = content.strip()
    fenced = FENCE.match(text)
    text = fenced.group(1).strip() if fenced else text
    if not text.startswith(("{", "[")):
        return [], content, []
    try:
        obj = model_json.loads(text)
    except ValueError as e:
        if '"name"' in text:  # meant as a call
            return [], content, [f"the reply looks like a tool call but is not valid JSON ({e}): {text[:200]}"]
        return [], content, []
    items = obj if isinstance(obj, list) else [obj]
    if not items or not all(isinstance(x, dict) and "name" in x for x in items):
        return [], content, []
    calls, errors = [], []
    for item in items:
        call, error = _call_of(item, model_json.dumps(item)[:200])
        if call is not None:
            calls.append(call)
        else:
            errors.append(error)
    return calls, "", errors


def tool_response_message(outputs: list[str], extra: str = "") -> dict:
    """The results of calls written as text, in the form Hermes-style templates use for them."""
    blocks = "\n".join(f"<tool_response>\n{out}\n</tool_response>" for out in outputs)
    return {"role": "user", "content": blocks + (f"\n{extra}" if extra else "")}


def tools_prompt(tools: list[dict]) -> str:
    """The tools and how to call them, for a system prompt (`--tool-format text`): any chat model
    can follow it, whatever its server or chat template does with structured tools."""
    lines = []
    for t in tools:
        fn = t.get("function", t)
        lines.append(json.dumps({"name": fn["name"], "description": fn.get("description", ""),
                                 "parameters": fn.get("parameters") or {}}, ensure_ascii=False))
    return ("# Tools\n\nYou can call these tools, described as JSON schemas:\n" + "\n".join(lines) +
            "\n\nTo call a tool, write the call in your reply as a JSON object inside <tool_call></tool_call> "
            'tags, for example:\n<tool_call>\n{"name": "execute_bash", "arguments": {"command": "ls"}}\n</tool_call>'
            "\nYou may write several calls in one reply; they run in order. The results come back in "
            "<tool_response></tool_response> blocks.")


def with_tools_in_prompt(messages: list[dict], tools: list[dict]) -> list[dict]:
    """The conversation with the tools' description at the end of its system message (one is
    added when there is none); the caller then sends no structured tools."""
    section = tools_prompt(tools)
    if messages and messages[0].get("role") == "system":
        first = messages[0]
        content = first.get("content")
        text = content if isinstance(content, str) else "".join(
            p.get("text", "") for p in content or [] if isinstance(p, dict))
        return [dict(first, content=f"{text}\n\n{section}" if text else section), *messages[1:]]
    return [{"role": "system", "content": section}, *messages]
