"""JSON a model writes, read without trusting it (core/model_json.py), and the clients' every reading of a
reply through it: nothing a reply holds raises anything but a ValueError the model is told about."""
from __future__ import annotations

import json

import pytest

from insandbox import Trajectory, arun
from insandbox.core import model_json
from insandbox.models.anthropic_messages import AnthropicClient, StreamedMessage, message_json, to_messages
from insandbox.models.base import ModelReply, refuse_cut_calls
from insandbox.models.openai_compat import completion_json
from insandbox.models.retrying import MalformedResponse
from insandbox.models.tool_text import parse_text_tool_calls
from insandbox.tools import ToolArgumentError, parse_arguments
from insandbox.tools.base import ToolCall


def deep_value(n: int) -> list:
    value: list = []
    for _ in range(n - 1):
        value = [value]
    return value


@pytest.mark.parametrize("text,reason", [
    ("[" * 100_000 + "]" * 100_000, "64 deep"), ("[" * 1000, "64 deep"), ('{"a": ' * 500 + "1" + "}" * 500, "64 deep"),
    ("[" * 65 + "]" * 65, "64 deep"), ('{"a": 1, "a": 2}', "appears twice"), ("[NaN]", "NaN is not"),
    ("[-Infinity]", "-Infinity is not"), ("1e400", "too large"), ("9" * 5000, "5,000 digits"), ("{oops}", "Expecting"),
])
def test_what_a_model_may_write_is_a_value_error_saying_why(text, reason):
    with pytest.raises(ValueError, match=reason):
        model_json.loads(text)
    with pytest.raises(ToolArgumentError, match=reason):  # and the tool layer tells the model
        parse_arguments(text)


def test_ordinary_json_reads_as_json_does():
    text = '{"command": "view", "path": "/testbed/é", "view_range": [1, 20], "x": -1.5e3, "n": null}'
    assert model_json.loads(text) == json.loads(text)
    assert model_json.loads("[" * 64 + "]" * 64) == deep_value(64)
    assert model_json.dumps(deep_value(64)) == "[" * 64 + "]" * 64
    with pytest.raises(ValueError, match="64 deep"):
        model_json.dumps(deep_value(65))
    with pytest.raises(ValueError, match="cannot be written"):
        model_json.dumps([float("nan")])


@pytest.mark.parametrize("n", [1000, 100_000])
def test_every_reading_of_a_reply_survives_any_nesting(n):
    deep = "[" * n + "]" * n
    for text in (deep, f"<tool_call>{deep}</tool_call>", "<tool_call>" + "[" * n, f"```json\n{deep}\n```",
                 f'<tool_call>{{"name": "submit", "arguments": {deep}}}</tool_call>', '{"name": ' + deep + "}",
                 f"<tool_call><function=submit><parameter=x>{deep}</parameter></function></tool_call>"):
        calls, _, errors = parse_text_tool_calls(text)
        assert all(isinstance(e, str) for e in errors) and len(calls) <= 1
    # a reply cut at max_tokens inside native arguments nested past reading: refused, not raised
    reply = ModelReply(content=None, tool_calls=[ToolCall(id="c", name="execute_bash", arguments=deep)],
                       message={"role": "assistant"}, finish_reason="length")
    refuse_cut_calls(reply, 100)
    assert "cut at max_tokens" in reply.tool_calls[0].refused
    # a body nested past reading is a failed try (retried), never a crash
    body = json.dumps({"choices": [{"message": {"content": "x"}}]}).replace('"x"', deep).encode()
    with pytest.raises(MalformedResponse):
        completion_json(body)
    with pytest.raises(MalformedResponse):
        message_json(b'{"content": ' + deep.encode() + b"}")


def test_the_messages_api_tool_inputs_nested_past_reading_are_told_to_the_model():
    client = AnthropicClient("claude", base_url="http://127.0.0.1:9/v1")
    data = {"content": [{"type": "tool_use", "id": "toolu_1", "name": "execute_bash",
                         "input": {"command": deep_value(200)}}], "stop_reason": "tool_use"}
    call = client.reply(data).tool_calls[0]
    assert call.refused and "64 deep" in call.refused
    # streamed: the input's text nested past reading stays text, and the tool layer says why
    stream = StreamedMessage()
    deep = "[" * 100_000 + "]" * 100_000
    for event in ({"type": "message_start", "message": {"role": "assistant", "content": []}},
                  {"type": "content_block_start", "index": 0,
                   "content_block": {"type": "tool_use", "id": "toolu_2", "name": "execute_bash", "input": {}}},
                  {"type": "content_block_delta", "index": 0,
                   "delta": {"type": "input_json_delta", "partial_json": '{"command": ' + deep + "}"}},
                  {"type": "content_block_stop", "index": 0},
                  {"type": "message_delta", "delta": {"stop_reason": "tool_use"}}, {"type": "message_stop"}):
        stream.add(event)
    call = client.reply(stream.message()).tool_calls[0]
    with pytest.raises(ToolArgumentError, match="64 deep"):
        parse_arguments(call.arguments)
    # the next request sends that turn back: its input goes as text, not as a crash
    _, messages = to_messages([{"role": "user", "content": "go"}, {
        "role": "assistant", "content": "", "tool_calls": [{"id": "toolu_2", "type": "function",
                                                            "function": {"name": "execute_bash",
                                                                         "arguments": call.arguments}}]}])
    assert messages[1]["content"][0]["input"] == {"_raw": call.arguments}


@pytest.mark.parametrize("stream", [False, True])
def test_a_run_through_the_messages_api_hears_its_nested_replies(scripted, run_async, tmp_path, docker_image,
                                                                 stream):
    deep = "[" * 100_000 + "]" * 100_000
    srv = scripted({"turns": [{"content": deep}, {"content": f"<tool_call>{deep}</tool_call>"}, {"tool": "submit"}]})
    result = run_async(arun("hostile", model="claude", provider="anthropic", base_url=srv.url, api_key="k",
                            output_dir=tmp_path, image=docker_image, stream=stream))
    t = Trajectory.load(tmp_path / "trajectory.json")
    assert result.exit_reason == "submitted" and t.exit_reason == "submitted", t.exit_detail
    assert t.steps[0].nudge_reason == "your reply had no tool call"
    assert "64 deep" in t.steps[1].nudge_reason
