"""The OpenAI-compatible client over real HTTP to the scripted server."""
from __future__ import annotations

import json
import socket

import pytest

from insandbox.models import ContextLengthError, ModelError, OpenAIChatClient
from insandbox.models.openai_compat import shrink_max_tokens

TOOLS = [{"type": "function", "function": {"name": "submit", "description": "done",
                                           "parameters": {"type": "object", "properties": {}, "required": []}}}]
MSGS = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


async def _once(client: OpenAIChatClient, *args):
    """One completion, the client closed after it (its connections with it)."""
    try:
        return await client.complete(*args)
    finally:
        await client.close()


def test_structured_tool_calls_usage_and_reasoning(scripted, run_async):
    srv = scripted({"turns": [{"tool_calls": [{"name": "execute_bash", "arguments": {"command": "ls"}},
                                              {"name": "submit", "arguments": {}}],
                               "content": "two calls", "reasoning_content": "because",
                               "usage": {"prompt_tokens": 123, "completion_tokens": 45}}]})
    client = OpenAIChatClient("m", base_url=srv.url, temperature=0.3, max_tokens=77,
                              extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    reply = run_async(_once(client, MSGS, TOOLS))
    assert [c.name for c in reply.tool_calls] == ["execute_bash", "submit"]
    assert json.loads(reply.tool_calls[0].arguments) == {"command": "ls"}
    assert reply.usage.prompt_tokens == 123 and reply.usage.completion_tokens == 45 and reply.usage.reported
    assert reply.reasoning == "because" and reply.content == "two calls"
    assert "reasoning_content" not in reply.message  # not sent back unless asked
    assert [c["id"] for c in reply.message["tool_calls"]] == [c.id for c in reply.tool_calls]
    sent = srv.requests[0]
    assert sent["params"]["temperature"] == 0.3 and sent["params"]["max_tokens"] == 77
    assert sent["params"]["chat_template_kwargs"] == {"enable_thinking": True}
    assert sent["tools"] == TOOLS


def test_prompt_cache_counts_are_read_in_each_vendors_fields(scripted, run_async):
    """What the price of a call depends on: OpenAI's cached_tokens (and OpenRouter's cache_write_tokens),
    DeepSeek's prompt_cache_hit_tokens, Moonshot's top-level cached_tokens."""
    srv = scripted({"turns": [
        {"content": "a", "usage": {"prompt_tokens": 900, "prompt_tokens_details": {"cached_tokens": 600,
                                                                                  "cache_write_tokens": 200}}},
        {"content": "b", "usage": {"prompt_tokens": 900, "prompt_cache_hit_tokens": 500,
                                   "prompt_cache_miss_tokens": 400}},
        {"content": "c", "usage": {"prompt_tokens": 900, "cached_tokens": 300}},
        {"content": "d", "usage": {"prompt_tokens": 900}}]})
    client = OpenAIChatClient("m", base_url=srv.url)
    # the server plays the turn of the number of assistant messages in the conversation
    got = [run_async(client.complete(MSGS + [{"role": "assistant", "content": "."}] * i)).usage for i in range(4)]
    run_async(client.close())
    assert [(u.cached_tokens, u.cache_write_tokens) for u in got] == [(600, 200), (500, None), (300, None),
                                                                       (None, None)]


def test_text_tool_calls_fallback_and_missing_usage(scripted, run_async):
    srv = scripted({"usage": False, "turns": [{"tool": "execute_bash", "args": {"command": "pwd"}, "as_text": True,
                                               "content": "Let me check."}]})
    reply = run_async(_once(OpenAIChatClient("m", base_url=srv.url), MSGS, TOOLS))
    assert reply.tool_calls_from_text and reply.tool_calls[0].name == "execute_bash"
    assert reply.content == "Let me check."  # what the console shows: the words, the call apart
    # the turn goes back exactly as the model wrote it (regression: it was rewritten into tool_calls,
    # which a chat template without tool support drops, so the model never saw its own call)
    written = srv.requests[0]["reply"]["content"]
    assert reply.message == {"role": "assistant", "content": written} and "<tool_call>" in written
    assert not reply.usage.reported and reply.usage.prompt_tokens > 0  # estimated


def test_retries_transient_errors(scripted, run_async):
    srv = scripted({"turns": [{"tool": "submit", "fail": {"status": 503, "times": 2}}]})
    reply = run_async(_once(OpenAIChatClient("m", base_url=srv.url, max_retries=3), MSGS, TOOLS))
    assert reply.tool_calls[0].name == "submit"
    assert [r["status"] for r in srv.requests] == [503, 503, 200]
    srv = scripted({"turns": [{"tool": "submit", "fail": {"status": 429, "times": 1}}]})
    reply = run_async(_once(OpenAIChatClient("m", base_url=srv.url, max_retries=2), MSGS, TOOLS))
    assert [r["status"] for r in srv.requests] == [429, 200]


def test_gives_up_with_a_clear_error(scripted, run_async):
    srv = scripted({"turns": [{"tool": "submit", "fail": {"status": 500, "times": 99, "message": "boom"}}]})
    with pytest.raises(ModelError, match="500.*boom"):
        run_async(_once(OpenAIChatClient("m", base_url=srv.url, max_retries=1), MSGS, TOOLS))
    assert len(srv.requests) == 2
    with socket.socket() as s:  # a port with nobody listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ModelError, match="cannot reach"):
        run_async(_once(OpenAIChatClient("m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0), MSGS))


def test_context_overflow_shrinks_max_tokens_then_stops(scripted, run_async):
    srv = scripted({"context_window": 600, "turns": [{"tool": "submit"}]})
    client = OpenAIChatClient("m", base_url=srv.url, max_tokens=4000)

    async def body():
        reply = await client.complete(MSGS, TOOLS)
        assert reply.tool_calls[0].name == "submit" and any("context overflow" in n for n in reply.notes)
        assert srv.requests[-1]["params"]["max_tokens"] < 600
        huge = [{"role": "user", "content": "x" * 10_000}]  # the prompt alone overflows: stop cleanly
        with pytest.raises(ContextLengthError):
            await client.complete(huge, TOOLS)
        await client.close()
    run_async(body())
def test_shrink_max_tokens_from_vllm_message():
    msg = ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
           "(3000 in the messages, 2000 in the completion).")
    assert shrink_max_tokens(msg, 2000) == 4096 - 3000 - 8
    too_long = ("This model's maximum context length is 4096 tokens. However, you requested 4500 tokens "
                "(4095 in the messages, 405 in the completion).")
    assert shrink_max_tokens(too_long, 405) is None  # the prompt alone does not fit: stop
    assert shrink_max_tokens("context length exceeded", 1000) == 500  # no numbers: halve
    assert shrink_max_tokens("context length exceeded", None) is None



def test_tool_choice_travels_with_the_tools(scripted, run_async):
    """Regression: no tool_choice was ever sent, and llama-cpp-python's server reads a request with
    tools but no tool_choice as "no tools": the model silently never saw them."""
    srv = scripted({"turns": [{"tool": "submit"}] * 4, "llm_turns": [{"content": "plain"}]})

    async def body():
        for kwargs in ({}, {"tool_choice": "required"}, {"tool_choice": None}):
            client = OpenAIChatClient("m", base_url=srv.url, **kwargs)
            await client.complete(MSGS, TOOLS)
            await client.complete(MSGS, None)  # plain mode: no tools, so no tool_choice either
            await client.close()
    run_async(body())
    params = [r["params"] for r in srv.requests]
    assert params[0]["tool_choice"] == "auto" and params[2]["tool_choice"] == "required"
    assert "tool_choice" not in params[4]
    assert all("tool_choice" not in p for p in params[1::2])


@pytest.mark.parametrize("body,content_type", [
    ("<html><body>502 Bad Gateway</body></html>", "text/html"),  # a proxy's page
    ("not json at all", "application/json"),  # declared JSON, but is not
    ('{"object": "error"}', "application/json"),  # JSON, but no choices
])
def test_a_200_that_is_not_a_chat_completion_is_retried_then_an_error(scripted, run_async, body, content_type):
    """Regression: an HTTP 200 whose body is not JSON gave a raw traceback and no exit reason."""
    fail = {"status": 200, "body": body, "content_type": content_type}
    srv = scripted({"scripts": [{"match": "transient", "turns": [{"tool": "submit", "fail": {**fail, "times": 2}}]},
                                {"match": "persistent", "turns": [{"tool": "submit", "fail": {**fail, "times": 99}}]}]})

    async def run(text, retries):
        client = OpenAIChatClient("m", base_url=srv.url, max_retries=retries)
        try:
            return await client.complete([{"role": "user", "content": text}], TOOLS)
        finally:
            await client.close()

    reply = run_async(run("transient", 3))
    assert reply.tool_calls[0].name == "submit" and len(reply.notes) == 2
    assert all("not a chat completion" in n or "not valid JSON" in n or "not JSON" in n or "no choices" in n
               for n in reply.notes)
    with pytest.raises(ModelError, match=r"not a chat completion: .*\(2 tries in .*no retries left") as err:
        run_async(run("persistent", 1))
    assert err.value.latency_s > 0
    assert sum(1 for r in srv.requests if r["conv"] == srv.requests[-1]["conv"]) == 2  # tried, retried once
