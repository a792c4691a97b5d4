"""insandbox against real third-party servers (tests/servers.py): llama.cpp's llama-server and
llama-cpp-python's own server, both serving SmolLM2-135M. A 135M model says little of use; these
tests check the plumbing: requests with insandbox's tool schemas, the conversation sent back,
usage, and whole runs that end on the model's terms."""
from __future__ import annotations

import json

import pytest

import insandbox
from insandbox.models import OpenAIChatClient
from tests.models.conversations import MESSAGES, TOOL_NAMES, TOOLS, two_turns

TASK = "Write the word hello to /testbed/answer.txt."


def converse(run_async, server, **params) -> list:
    client = OpenAIChatClient(server.model, base_url=server.base_url, temperature=0, max_tokens=48, max_retries=0,
                              **params)
    return two_turns(run_async, client)


def check_replies(replies) -> None:
    for reply in replies:
        assert reply.finish_reason in ("stop", "length", "tool_calls"), reply
        assert reply.usage.reported and reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
        assert reply.content or reply.tool_calls
        assert {c.name for c in reply.tool_calls} <= TOOL_NAMES
        for call in reply.tool_calls:
            assert isinstance(json.loads(call.arguments or "{}"), dict)
    assert replies[1].usage.prompt_tokens > replies[0].usage.prompt_tokens  # the first turn went back


def test_llama_server_holds_a_conversation_with_the_tool_schemas(llama_server, run_async):
    replies = converse(run_async, llama_server)
    check_replies(replies)
    assert llama_server.model == "smollm2-135m-instruct"
    assert llama_server.supports_messages  # llama.cpp serves Anthropic's Messages API too


def test_llama_server_drops_tools_the_chat_template_cannot_show(llama_server, run_async):
    """SmolLM2's template has no tools in it: with --jinja, llama-server renders the conversation
    without them (no fallback prompt), so the model never sees the tools, and it answers in text.
    Models whose template describes tools (Qwen, Llama 3.x, Hermes) get native tool calls."""
    async def usage(tools):
        client = OpenAIChatClient(llama_server.model, base_url=llama_server.base_url, temperature=0, max_tokens=1)
        try:
            return (await client.complete(MESSAGES, tools)).usage.prompt_tokens
        finally:
            await client.close()
    assert run_async(usage(TOOLS)) == run_async(usage(None))


@pytest.mark.parametrize("llama_cpp_python_server", ["chatml-function-calling"], indirect=True)
def test_llama_cpp_python_function_calling_returns_structured_calls(llama_cpp_python_server, run_async):
    replies = converse(run_async, llama_cpp_python_server)
    check_replies(replies)
    # its grammar lets the model choose between a message and calls; asked for a command, it calls
    assert replies[0].tool_calls and not replies[0].tool_calls_from_text
    assert not llama_cpp_python_server.supports_messages


@pytest.mark.parametrize("llama_cpp_python_server", ["chatml"], indirect=True)
def test_llama_cpp_python_plain_chat_format_answers_in_text(llama_cpp_python_server, run_async):
    replies = converse(run_async, llama_cpp_python_server)
    check_replies(replies)
    assert not replies[0].tool_calls  # the chatml format knows nothing of tools


def run_against(server, docker_image, tmp_path, max_steps=3):
    result = insandbox.run(TASK, base_url=server.base_url, model=server.model, max_steps=max_steps, max_tokens=48,
                           temperature=0, max_retries=0, image=docker_image, output_dir=tmp_path)
    t = json.loads((tmp_path / "trajectory.json").read_text())
    assert result.exit_reason is not None and not result.exit_reason.is_failure, t.get("exit_detail")
    assert t["exit_reason"] in ("max_steps", "submitted", "stuck") and t["config"]["base_url"] == server.base_url
    assert t["steps"] and all(s["usage_reported"] and s["prompt_tokens"] > 0 for s in t["steps"])
    assert not t.get("failed_requests")
    return t


def test_a_run_against_llama_server_ends_on_the_models_terms(llama_server, docker_image, tmp_path):
    run_against(llama_server, docker_image, tmp_path)


@pytest.mark.parametrize("llama_cpp_python_server", ["chatml-function-calling"], indirect=True)
def test_a_run_against_llama_cpp_python_runs_its_calls_in_the_sandbox(llama_cpp_python_server, docker_image,
                                                                      tmp_path):
    # two steps: its prompts carry the tool schemas (~1,500 tokens), read at ~100 tokens/s on one thread
    t = run_against(llama_cpp_python_server, docker_image, tmp_path, max_steps=2)
    calls = [c for s in t["steps"] for c in s["tool_calls"]]
    assert calls and all(c["name"] in TOOL_NAMES and c["output"] is not None for c in calls)
