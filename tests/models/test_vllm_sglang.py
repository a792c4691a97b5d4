"""What vLLM and SGLang do differently, against the scripted server playing each: the two
reasoning field names, chat_template_kwargs (Qwen3's enable_thinking), --send-reasoning,
tool_choice and parallel_tool_calls, and the Hermes and Qwen3-Coder call formats of a server
started without a tool parser."""
from __future__ import annotations

import asyncio
import json

import pytest

from insandbox.models import OpenAIChatClient

TOOLS = [{"type": "function", "function": {"name": "execute_bash", "description": "run", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}}}}]


def conversation(srv, run_async, turns: int = 1, **kw):
    async def go():
        client = OpenAIChatClient("Qwen/Qwen3-4B-Instruct-2507", base_url=srv.url, **kw)
        messages, replies = [{"role": "user", "content": "u"}], []
        try:
            for _ in range(turns):
                reply = await asyncio.wait_for(client.complete(messages, TOOLS), 30)
                replies.append(reply)
                messages.append(reply.message)
                messages.extend({"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in reply.tool_calls)
        finally:
            await client.close()
        return replies
    return run_async(go())


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])  # SGLang / older vLLM; vLLM >= 0.10
@pytest.mark.parametrize("stream", [False, True])
def test_both_reasoning_field_names_are_read(scripted, run_async, field, stream):
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": "ls"}, field: "think first"}]})
    [reply] = conversation(srv, run_async, stream=stream)
    assert reply.reasoning == "think first" and reply.tool_calls[0].name == "execute_bash"


@pytest.mark.parametrize("send", [False, True])
def test_send_reasoning_puts_it_back_into_the_history(scripted, run_async, send):
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": "ls"}, "reasoning": "plan"},
                              {"tool": "submit"}]})
    conversation(srv, run_async, turns=2, send_reasoning=send)
    sent = srv.requests[1]["messages"][1]
    assert sent["role"] == "assistant" and (sent.get("reasoning_content") == "plan") is send


def test_chat_template_kwargs_tool_choice_and_parallel_tool_calls_reach_the_server(scripted, run_async):
    srv = scripted({"turns": [{"tool": "submit"}]})
    conversation(srv, run_async, tool_choice="required",
                 extra_body={"chat_template_kwargs": {"enable_thinking": False}, "parallel_tool_calls": False})
    params = srv.requests[0]["params"]
    assert params["chat_template_kwargs"] == {"enable_thinking": False}
    assert params["tool_choice"] == "required" and params["parallel_tool_calls"] is False


@pytest.mark.parametrize("text", [
    '<tool_call>\n{"name": "execute_bash", "arguments": {"command": "ls -l"}}\n</tool_call>',  # Hermes
    "<tool_call>\n<function=execute_bash>\n<parameter=command>\nls -l\n</parameter>\n</function>\n</tool_call>",
])
def test_calls_a_server_left_in_the_text_are_read_hermes_and_qwen3_coder(scripted, run_async, text):
    """vLLM without --enable-auto-tool-choice (or with the wrong --tool-call-parser) returns the calls as text."""
    srv = scripted({"turns": [{"content": "Listing.\n" + text}]})
    [reply] = conversation(srv, run_async)
    assert reply.tool_calls_from_text and json.loads(reply.tool_calls[0].arguments) == {"command": "ls -l"}
    assert reply.content == "Listing." and reply.message["content"] == "Listing.\n" + text  # sent back as written
