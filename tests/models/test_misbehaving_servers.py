"""Model-server faults that used to end a run badly (issue 22), each played byte for byte by a
server of the tests' own (tests/models/misbehaving.py) and, where the fault is a real server's,
checked against that server too:

- a stream cut in the middle (either API) or unreadable: retried, never an internal error;
- an error event inside a 200 stream: retried as the same error outside a stream would be;
- an error naming a server start-up flag (llama-server without --jinja): not retried, with the fix;
- --logprobs: recorded from llama-cpp-python's server, and said once when a server cannot.
"""
from __future__ import annotations

import asyncio
import json
import re

import pytest

from insandbox import Trajectory, arun
from insandbox.models import ModelError, OpenAIChatClient
from insandbox.models.anthropic_messages import AnthropicClient
from insandbox.models.retrying import transport_error
from insandbox.tools import ToolBox, default_tools
from tests.models.misbehaving import (
    Answer,
    Misbehaving,
    anthropic_events,
    chat_chunks,
    chat_completion,
    reply,
    sse,
)
from tests.servers import N_CTX, gguf, llama_server_binary, start, stop, threads

TOOLS = [{"type": "function", "function": {"name": "execute_bash", "description": "run a command", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
FAST = (0.01, 0.02)
ARGS = '{"command": "ls -la /testbed"}'
TOOL_USE = [{"type": "tool_use", "id": "toolu_1", "name": "execute_bash", "input": json.loads(ARGS)}]


def client(api: str, url: str, **kw):
    kw = {"backoff": FAST, **kw}
    return AnthropicClient("m", base_url=url, **kw) if api == "anthropic" else OpenAIChatClient("m", base_url=url, **kw)


def ask(api: str, answers: list, times: int = 1, **kw):
    """`times` requests through one client of `api` against a server playing `answers`: (replies, requests)."""
    async def go():
        with Misbehaving(answers) as srv:
            c = client(api, srv.url, **kw)
            try:
                return [await asyncio.wait_for(c.complete([{"role": "user", "content": "u"}], TOOLS), 30)
                        for _ in range(times)], srv.requests
            finally:
                await c.close()
    return asyncio.run(go())


def good_stream(api: str) -> Answer:
    return sse(anthropic_events(TOOL_USE) if api == "anthropic" else chat_chunks("", (("execute_bash", ARGS),)))


def what_the_model_reads(call) -> str:
    """The tool result the loop sends back for this call (no sandbox needed: it is refused first)."""
    out, _ = asyncio.run(ToolBox(default_tools()).call(None, call))
    assert out.error
    return out.text


# ------------------------------------------------------------------------ streams cut or unreadable

@pytest.mark.parametrize("api, events_before_cut", [("anthropic", 5), ("openai", 4)])
def test_a_stream_cut_inside_a_tool_call_is_retried(api, events_before_cut):
    """Regression (anthropic): the cut surfaced as httpx2's RemoteProtocolError, which the retry
    classifier did not know, and the run ended as internal_error."""
    cut = good_stream(api)
    cut.cut_after = events_before_cut  # inside the tool call's arguments
    [r], requests = ask(api, [cut, good_stream(api)], stream=True)
    assert len(requests) == 2 and r.tool_calls[0].arguments == ARGS
    unit = "events" if api == "anthropic" else "chunks"
    assert re.search(rf"broke (after {events_before_cut} {unit} of its stream|before a complete answer): .*peer "
                     "closed connection", r.notes[0]), r.notes


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_a_stream_event_that_is_not_json_is_a_retried_try(api):
    """Regression: the SDK's JSONDecodeError escaped the client (internal_error)."""
    events = good_stream(api).events
    [r], requests = ask(api, [sse(events[:2] + [(events[2][0], "{not json")]), good_stream(api)], stream=True)
    assert len(requests) == 2 and r.tool_calls[0].arguments == ARGS
    assert "stream could not be read after 2 " in r.notes[0] and "JSONDecodeError" in r.notes[0]


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_a_run_whose_stream_keeps_breaking_ends_model_error_not_internal_error(api, tmp_path):
    cut = good_stream(api)
    cut.cut_after = 3

    async def go():
        with Misbehaving([cut]) as srv:
            c = client(api, srv.url, stream=True, max_retries=2)
            try:
                return await arun("q", model_client=c, mode="llm", output_dir=tmp_path / "run")
            finally:
                await c.close()
    result = asyncio.run(go())
    t = Trajectory.load(tmp_path / "run" / "trajectory.json")
    assert result.trajectory.exit_reason == "model_error" and t.exit_reason == "model_error"
    assert "broke" in t.exit_detail and "3 tries" in t.exit_detail and "please report" not in t.exit_detail


def test_transport_errors_are_known_by_what_they_are_whatever_package_raises_them():
    def error(module: str, name: str = "SomeError") -> Exception:
        return type(name, (Exception,), {"__module__": module})("x")

    assert transport_error(error("httpx2._transports.default")) is not None  # the SDKs' vendored httpx
    assert transport_error(error("httpcore9._exceptions")) is not None
    assert transport_error(error("some.lib", "RemoteProtocolError")) is not None
    wrapped = RuntimeError("while reading")
    wrapped.__cause__ = ConnectionResetError("reset by peer")
    assert transport_error(wrapped) is wrapped.__cause__
    assert transport_error(ValueError("a bug")) is None and transport_error(error("httpxtools")) is None


# ------------------------------------------------------------------------ error events in a 200 stream

def error_event(kind: str, message: str) -> tuple[str, dict]:
    return "error", {"type": "error", "error": {"type": kind, "message": message}}


def test_an_overloaded_error_event_inside_a_200_stream_is_retried():
    """Regression: the SDK raised it as a status error with the stream's status (200), which was
    'rejected the request (200)' and never retried, though overloaded errors are."""
    events = anthropic_events(TOOL_USE)
    [r], requests = ask("anthropic", [sse(events[:3] + [error_event("overloaded_error", "Overloaded")]),
                                      good_stream("anthropic")], stream=True)
    assert len(requests) == 2 and r.tool_calls[0].arguments == ARGS
    assert r.notes[0].startswith("the model server's stream ended with an error event (overloaded_error): Overloaded;")


def test_an_invalid_request_error_event_is_not_retried():
    events = anthropic_events(TOOL_USE)
    with pytest.raises(ModelError, match=r"^the model server's stream ended with an error event "
                                         r"\(invalid_request_error\): bad field$"):
        ask("anthropic", [sse(events[:1] + [error_event("invalid_request_error", "bad field")])], stream=True)


# ------------------------------------------------------------------------ errors that name a server flag

JINJA = {"error": {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}}


def test_a_500_naming_a_missing_server_flag_fails_at_once_with_the_fix():
    """Regression: llama-server's answer without --jinja was retried for 13 s, with no word of
    --tool-format text."""
    with pytest.raises(ModelError) as err:
        ask("openai", [reply(500, JINJA)], max_retries=5)
    assert str(err.value) == ("model server error 500: tools param requires --jinja flag (llama-server takes tools "
                              "only with its --jinja flag: restart it with --jinja, or run with --tool-format text "
                              "(the tools then go in the system prompt))")


def test_any_error_naming_a_start_up_flag_is_not_retried_and_a_400_gets_the_hint_too():
    answers = [reply(503, {"error": {"message": "speculative decoding is off: start the server with --spec-model"}})]
    with Misbehaving(answers) as srv:
        async def go():
            c = client("openai", srv.url, max_retries=5)
            try:
                await c.complete([{"role": "user", "content": "u"}], TOOLS)
            finally:
                await c.close()
        with pytest.raises(ModelError, match=r"--spec-model \(the server names a start-up flag: restart it with "
                                             r"that flag set\)$"):
            asyncio.run(go())
        assert len(srv.requests) == 1
    vllm = {"error": {"message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to '
                                 "be set", "type": "BadRequestError"}}
    with pytest.raises(ModelError, match=r"rejected the request \(400\): .*\(start vLLM with --enable-auto-tool-choice "
                                         r"--tool-call-parser <the model's parser>, or run with --tool-format text\)$"):
        ask("openai", [reply(400, vllm)])


def test_llama_server_without_jinja_fails_at_once_with_the_fix(tmp_path):
    """The real thing: llama.cpp's llama-server started with --no-jinja, asked with tools."""
    binary, model = llama_server_binary(), gguf()

    def argv(port: int) -> list[str]:
        return [str(binary), "-m", str(model), "--no-jinja", "-c", str(N_CTX), "-np", "1", "-t", str(threads()),
                "-a", "m", "--host", "127.0.0.1", "--port", str(port), "--no-webui"]

    server = start("llama-server --no-jinja", argv, "/health", tmp_path)
    try:
        async def go():
            c = OpenAIChatClient("m", base_url=server.base_url, max_retries=5, max_tokens=4)
            try:
                await c.complete([{"role": "user", "content": "hi"}], TOOLS)
            finally:
                await c.close()
        with pytest.raises(ModelError) as err:
            asyncio.run(go())
    finally:
        stop(server)
    assert "tools param requires --jinja flag" in str(err.value) and "--tool-format text" in str(err.value)
    assert "tries" not in str(err.value)  # one try: nothing was retried


# ------------------------------------------------------------------------ --logprobs

def lp_answer(body: dict, sent: bool) -> Answer:
    content = [{"token": "hi", "logprob": -0.5, "top_logprobs": [{"token": "hi", "logprob": -0.5}]}]
    data = chat_completion("hi", (), "stop")
    if sent:
        data["choices"][0]["logprobs"] = {"content": content}
    return reply(200, data)


def test_logprobs_are_recorded_from_a_server_that_sends_them_only_with_top_logprobs():
    """Like llama-cpp-python's server: logprobs only when top_logprobs is in the request (not even
    with 0 for llama-server). Regression: --logprobs alone recorded nothing and said nothing."""
    def server(body):
        return lp_answer(body, sent=body.get("logprobs") and body.get("top_logprobs") is not None)
    [r], requests = ask("openai", [server], logprobs=True)
    assert requests[0]["body"]["top_logprobs"] == 1
    assert r.logprobs == [{"token": "hi", "logprob": -0.5}] and not r.notes  # the alternative nobody asked for: gone
    [r], _ = ask("openai", [server], logprobs=True, top_logprobs=3)
    assert r.logprobs == [{"token": "hi", "logprob": -0.5, "top": {"hi": -0.5}}]


@pytest.mark.parametrize("llama_cpp_python_server", ["chatml"], indirect=True)
def test_llama_cpp_python_server_gives_logprobs_for_logprobs_alone(llama_cpp_python_server):
    async def go():
        c = OpenAIChatClient(llama_cpp_python_server.model, base_url=llama_cpp_python_server.base_url,
                             temperature=0, max_tokens=4, logprobs=True)
        try:
            return await c.complete([{"role": "user", "content": "Say hi."}])
        finally:
            await c.close()
    r = asyncio.run(go())
    assert r.logprobs and len(r.logprobs) == r.usage.completion_tokens and not r.notes
    assert all(set(t) == {"token", "logprob"} for t in r.logprobs)


def test_a_server_sending_no_logprobs_is_said_once():
    """Like llama-cpp-python's function-calling format, which sends none for tool calls."""
    [first, second], _ = ask("openai", [reply(200, chat_completion(None, (("execute_bash", ARGS),)))], times=2,
                             logprobs=True)
    assert first.logprobs is None and second.logprobs is None
    assert first.notes == ["hint: --logprobs: the model server sent no log probabilities for this reply (some servers "
                           "send none for tool calls: llama-cpp-python's chatml-function-calling format); steps "
                           "without them record none (said once)"]
    assert second.notes == []


REFUSED = {"error": {"code": 400, "message": "logprobs is not supported with tools + stream",
                     "type": "invalid_request_error"}}


def test_logprobs_refused_with_tools_and_streaming_are_dropped_and_said_once():
    """Like llama-server, which refuses logprobs with tools and streaming (400). Regression: the
    run ended model_error at its first request."""
    def server(body):
        if body.get("logprobs") and body.get("tools") and body.get("stream"):
            return reply(400, REFUSED)
        return good_stream("openai")
    [first, second], requests = ask("openai", [server], times=2, stream=True, logprobs=True)
    assert [bool(q["body"].get("logprobs")) for q in requests] == [True, False, False]
    assert first.tool_calls[0].arguments == ARGS and first.logprobs is None
    assert first.notes == ["hint: --logprobs: the model server refuses log probabilities here (logprobs is not "
                           "supported with tools + stream), so this run records none (leave out --stream, or use "
                           "--tool-format text, to record them)"]
    assert second.notes == []


def test_llama_server_with_tools_and_streaming_runs_on_without_logprobs(llama_server):
    async def go():
        c = OpenAIChatClient(llama_server.model, base_url=llama_server.base_url, temperature=0, max_tokens=4,
                             stream=True, logprobs=True)
        try:
            return [await c.complete([{"role": "user", "content": "Say hi."}], TOOLS) for _ in range(2)]
        finally:
            await c.close()
    first, second = asyncio.run(go())
    assert "supported with tools + stream" in first.notes[0] and not second.notes
    assert first.usage.completion_tokens > 0
