"""Model-server faults that used to end a run badly (issue 22), each played byte for byte by a
server of the tests' own (tests/models/misbehaving.py) and, where the fault is a real server's,
checked against that server too:

- a stream cut in the middle (either API) or unreadable: retried, never an internal error;
- an error event inside a 200 stream: retried as the same error outside a stream would be;
- a tool call whose input is not JSON, or cut by max_tokens: one request, and the model reads why;
- an error naming a server start-up flag (llama-server without --jinja): not retried, with the fix;
- --logprobs: recorded from llama-cpp-python's server, and said once when a server cannot;
- the SDK's import is not timed as the first request.
"""
from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import textwrap

import pytest

from insandbox import Trajectory, arun
from insandbox.models import ModelError, OpenAIChatClient
from insandbox.models.anthropic_messages import AnthropicClient
from insandbox.models.retrying import transport_error
from insandbox.tools import ToolBox, default_tools
from tests.helpers import REPO, cli
from tests.models.misbehaving import (
    Answer,
    Misbehaving,
    anthropic_events,
    anthropic_message,
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


# ------------------------------------------------------------------------ tool calls the model got wrong

def test_a_tool_use_whose_input_is_not_json_reaches_the_model_as_its_error_streamed_or_not():
    """Regression: streamed, the same paid request was retried three times and the run ended
    model_error; unstreamed, the model was told. Now both tell the model, after one request."""
    bad = '{"command": "ls'
    streamed = sse(anthropic_events(TOOL_USE, input_json={0: bad}))
    plain = reply(200, anthropic_message([dict(TOOL_USE[0], input=bad)]))
    told = []
    for answer, stream in ((streamed, True), (plain, False)):
        [r], requests = ask("anthropic", [answer, good_stream("anthropic")], stream=stream)
        assert len(requests) == 1 and not r.notes and r.finish_reason == "tool_calls"
        assert r.tool_calls[0].arguments == bad
        told.append(what_the_model_reads(r.tool_calls[0]))
    assert told[0] == told[1] and "not valid JSON" in told[0]


CUT = '{"command": "cat > /testbed/long.py <<EOF\\nimport os\\nfor'  # arguments cut by max_tokens


def cut_answer(api: str, stream: bool) -> Answer:
    if api == "anthropic":
        if stream:
            return sse(anthropic_events(TOOL_USE, stop="max_tokens", input_json={0: CUT}))
        # unstreamed, the API sends what of the input it could read as an object
        return reply(200, anthropic_message([{"type": "text", "text": "Writing it."},
                                             dict(TOOL_USE[0], input={"command": "cat > /testbed/long.py"})],
                                            stop="max_tokens"))
    calls = (("execute_bash", ARGS), ("execute_bash", CUT))  # the first call was whole, the second cut
    return sse(chat_chunks("", calls, "length")) if stream else reply(200, chat_completion(None, calls, "length"))


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_a_reply_cut_at_max_tokens_inside_a_tool_call_tells_the_model_why(api, stream):
    """Regression: the model read 'arguments are not valid JSON' (the OpenAI path, unstreamed
    Anthropic) or the request was retried identically (streamed Anthropic); nobody was told of
    max_tokens."""
    [r], requests = ask(api, [cut_answer(api, stream), good_stream(api)], stream=stream, max_tokens=64)
    assert len(requests) == 1 and r.finish_reason == "length"
    *whole, cut = r.tool_calls
    assert all(c.refused is None for c in whole)  # a call complete before the cut still runs
    told = what_the_model_reads(cut)
    assert told.startswith("Error in the call to execute_bash: your reply was cut at max_tokens (64 tokens) before "
                           "the call's arguments were complete, so it was not run; make the call again with "
                           "shorter arguments"), told
    assert [n for n in r.notes if "max_tokens" in n] == [
        "hint: the reply was cut at max_tokens (64 tokens) inside a call to execute_bash: not run, and the model "
        "was told why; raise --max-tokens if this happens often"]


def test_a_call_written_as_text_cut_at_max_tokens_is_said_in_the_nudge():
    text = 'Let me look.\n<tool_call>\n{"name": "execute_bash", "arguments": {"command": "ls -la /te'
    [r], _ = ask("openai", [reply(200, chat_completion(text, (), "length"))], tool_format="text", max_tokens=32)
    assert not r.tool_calls and len(r.tool_call_errors) == 1
    assert r.tool_call_errors[0].startswith("your reply was cut at max_tokens (32 tokens) before the call's "
                                            "arguments were complete (a <tool_call> block is not valid JSON")
    assert sum("max_tokens" in n for n in r.notes) == 1


def test_a_run_cut_at_max_tokens_shows_it_once_on_the_console_and_records_it(tmp_path, docker_image):
    answers = [reply(200, chat_completion("Writing the file.", (("execute_bash", CUT),), "length")),
               reply(200, chat_completion(None, (("submit", "{}"),), "tool_calls"))]
    with Misbehaving(answers) as srv:
        r = cli("run", "write long.py", "--model", "m", "--base-url", srv.url, "--max-tokens", "64", "--image",
                docker_image, "--out", str(tmp_path / "run"), env={"COLUMNS": "400"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("raise --max-tokens if this happens often") == 1, r.stdout
    t = Trajectory.load(tmp_path / "run" / "trajectory.json")
    assert t.exit_reason == "submitted"
    [call] = t.steps[0].tool_calls
    assert call.error and "your reply was cut at max_tokens (64 tokens)" in call.output
    assert [sum("max_tokens" in n for n in s.notes) for s in t.steps] == [1, 0]


# ------------------------------------------------------------------------ the SDK's import is not the model's time

CLOCK = """
import asyncio, json, sys, time
sys.path[:0] = {paths!r}
from tests.models.misbehaving import (Misbehaving, anthropic_events, anthropic_message, chat_chunks,
                                     chat_completion, reply, sse)
SDKS = ("anthropic", "openai", "httpx", "httpcore", "anyio", "opentelemetry")
imports = []

class Seen:  # notes every import as it starts, with the moment
    def find_spec(self, name, path=None, target=None):
        imports.append((time.perf_counter(), name))

sys.meta_path.insert(0, Seen())
from insandbox.models import OpenAIChatClient
from insandbox.models.anthropic_messages import AnthropicClient
api, stream = sys.argv[1], sys.argv[2] == "stream"
assert not any(m.split(".")[0].rstrip("0123456789") in SDKS for m in sys.modules), "an SDK came in already"
call = [{{"type": "tool_use", "id": "t1", "name": "submit", "input": {{}}}}]
if api == "anthropic":
    answer = sse(anthropic_events(call)) if stream else reply(200, anthropic_message(call))
else:
    answer = sse(chat_chunks("x")) if stream else reply(200, chat_completion("x"))

async def main():
    with Misbehaving([answer]) as srv:
        cls = AnthropicClient if api == "anthropic" else OpenAIChatClient
        c = cls("m", base_url=srv.url, stream=stream)
        r = await c.complete([{{"role": "user", "content": "u"}}], [])
        end = time.perf_counter()
        await c.close()
    timed = [n for t, n in imports if end - r.latency_s <= t <= end]
    print(json.dumps({{"timed": timed, "sdk_imported": api in sys.modules}}))

asyncio.run(main())
"""


@pytest.mark.parametrize("stream", ["plain", "stream"])
@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_the_first_requests_time_holds_no_import(api, stream):
    """Regression: the first step's model_latency_s included importing the SDK (1.7 s for OpenAI's,
    4.6-12 s for Anthropic's). A fresh interpreter notes every import with its moment: none may
    fall inside the first request's timed span. No clock speed enters the check."""
    script = CLOCK.format(paths=[str(REPO)])  # insandbox itself as the environment gives it
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script), api, stream], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["sdk_imported"] and seen["timed"] == []
