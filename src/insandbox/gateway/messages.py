"""What a harness sends, in the one form the policy sees, and the replies it gets.

The gateway tokenizes only what the environment adds, in the form insandbox's rollouts use (the
tools written as text, results in <tool_response> blocks: rl/rollout/chat.py), whatever form the
harness speaks:

    system, user                  as they are (content parts joined into their text)
    tool, tool, ...               one user message of <tool_response> blocks, in order
    assistant                     must be a reply this gateway gave (same text, or same calls); its ids
                                  are the ones sampled, never re-rendered

So the same episode gives the same ids through the gateway as through insandbox's own token-level
client. A reply goes back with its calls as structured `tool_calls` when every <tool_call> block in
it reads; else as the text the model wrote (a harness that reads calls from text sees the broken
block, as the model wrote it).
"""
from __future__ import annotations

import json
import uuid
from typing import Any, Optional

from ..core import model_json
from ..core.errors import DataError
from ..models.tool_text import parse_text_tool_calls, tool_response_message


class BadRequest(DataError):
    """The request cannot be served as asked (said why, in one line)."""


def text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type", "text") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict):
                raise BadRequest(f"a content part of type {part.get('type')!r}: the gateway records text only")
        return "".join(parts)
    raise BadRequest(f"message content of type {type(content).__name__}")


def split_turns(messages: list[dict]) -> tuple[list[dict], list[tuple[dict, list[dict]]]]:
    """(the messages before the first assistant message, [(assistant message, the messages after it)])."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: a non-empty list")
    prefix: list[dict] = []
    turns: list[tuple[dict, list[dict]]] = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest("every message is an object with a role")
        if m["role"] == "assistant":
            turns.append((m, []))
        elif turns:
            turns[-1][1].append(m)
        else:
            prefix.append(m)
    if turns and not turns[-1][1]:
        raise BadRequest("the conversation ends with an assistant message: the gateway samples whole turns")
    return prefix, turns


def environment_messages(messages: list[dict]) -> list[dict]:
    """Messages that are not the model's, in the policy's form: runs of tool results become one
    <tool_response> message."""
    out: list[dict] = []
    results: list[str] = []
    for m in messages:
        role = m["role"]
        if role == "tool":
            results.append(text_of(m.get("content")))
            continue
        if results:
            out.append(tool_response_message(results))
            results = []
        if role in ("system", "developer"):
            out.append({"role": "system", "content": text_of(m.get("content"))})
        elif role == "user":
            out.append({"role": "user", "content": text_of(m.get("content"))})
        else:
            raise BadRequest(f"a message with role {role!r}")
    if results:
        out.append(tool_response_message(results))
    return out


def assistant_text(message: dict) -> str:
    """An assistant message the gateway did not sample, as text (its calls as <tool_call> blocks)."""
    text = text_of(message.get("content"))
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        try:
            args = model_json.loads(fn.get("arguments") or "{}") if isinstance(fn.get("arguments"), str) \
                else fn.get("arguments")
        except ValueError:
            args = fn.get("arguments")
        block = json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False)
        text += f"\n<tool_call>\n{block}\n</tool_call>"
    return text.strip() if message.get("tool_calls") else text


def reply_message(text: str) -> dict:
    """The assistant message for a sampled turn's text: structured calls when every block reads."""
    calls, rest, errors = parse_text_tool_calls(text) if "<tool_call>" in text else ([], text, [])
    if not calls or errors:
        return {"role": "assistant", "content": text}
    return {"role": "assistant", "content": rest or None,
            "tool_calls": [{"id": "call_" + uuid.uuid4().hex[:16], "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments}} for c in calls]}


def _calls(message: dict) -> Optional[list[tuple[Any, Any]]]:
    out = []
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            return None
        fn = call.get("function") or {}
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = model_json.loads(args or "{}")
            except ValueError:
                return None
        out.append((fn.get("name"), args))
    return out


def same_reply(sent: dict, text: str, reply: dict) -> bool:
    """Whether the harness's assistant message is the reply the gateway gave (as it gave it, or as the
    text the model wrote, or with its calls re-serialised)."""
    try:
        content = text_of(sent.get("content"))
    except BadRequest:
        return False
    if not sent.get("tool_calls"):
        return content == text or (not reply.get("tool_calls") and content == text_of(reply.get("content")))
    return (content.strip() == text_of(reply.get("content")).strip()
            and _calls(sent) is not None and _calls(sent) == _calls(reply))
