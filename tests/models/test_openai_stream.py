"""Streamed chat completions (server-sent events) and per-token log probabilities, over real HTTP
against the scripted server: the streamed reply is the same reply, with its time to first token."""
from __future__ import annotations

import asyncio

import pytest

from insandbox import Trajectory
from insandbox.models import ModelError, OpenAIChatClient
from tests.helpers import cli

TOOLS = [{"type": "function", "function": {"name": n, "description": n, "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}}}} for n in ("execute_bash", "submit")]
FAST = (0.02, 0.1)
TURN = {"tool_calls": [{"name": "execute_bash", "arguments": {"command": "ls -la /testbed"}},
                       {"name": "submit", "arguments": {}}],
        "content": "Two calls in one reply, with text around them.", "reasoning_content": "Plan: look, then stop."}


def ask(srv, run_async, **kw):
    async def go():
        client = OpenAIChatClient("m", base_url=srv.url, **{"backoff": FAST, **kw})
        pieces = []
        client.on_delta = lambda kind, text: pieces.append((kind, text))
        try:
            return await asyncio.wait_for(client.complete([{"role": "user", "content": "u"}], TOOLS), 30), pieces
        finally:
            await client.close()
    return run_async(go())


def test_a_streamed_reply_is_the_same_reply_with_its_time_to_first_token(scripted, run_async):
    srv = scripted({"turns": [TURN], "token_latency": 0.01})
    plain, none = ask(srv, run_async)
    streamed, pieces = ask(srv, run_async, stream=True)
    assert not none and plain.ttft_s is None and not plain.streamed
    assert streamed.streamed and 0 < streamed.ttft_s < streamed.latency_s
    assert streamed.content == plain.content and streamed.reasoning == plain.reasoning
    assert [(c.name, c.arguments) for c in streamed.tool_calls] == [(c.name, c.arguments) for c in plain.tool_calls]
    assert streamed.message == plain.message | {"tool_calls": streamed.message["tool_calls"]}
    assert streamed.usage == plain.usage and streamed.usage.reported  # usage came in the last chunk
    assert streamed.finish_reason == "tool_calls"
    assert "".join(t for k, t in pieces if k == "content") == TURN["content"]
    assert "".join(t for k, t in pieces if k == "reasoning") == TURN["reasoning_content"]
    assert srv.requests[1]["params"]["stream"] is True
    assert srv.requests[1]["params"]["stream_options"] == {"include_usage": True}


def test_a_stalled_stream_is_retried_then_a_clear_error(scripted, run_async):
    srv = scripted({"turns": [{"tool": "submit", "fail": {"stall": 2, "times": 1}}]})
    reply, _ = ask(srv, run_async, stream=True, stall_timeout=0.4)
    assert reply.tool_calls[0].name == "submit" and "sent nothing for 0.4 s (2 chunks had come)" in reply.notes[0]
    srv = scripted({"turns": [{"tool": "submit", "fail": {"stall": 0, "times": 9}}]})
    with pytest.raises(ModelError, match="sent nothing for 0.3 s .*stream stalled x2; no retries left"):
        ask(srv, run_async, stream=True, stall_timeout=0.3, max_retries=1)


def test_empty_chunks_sent_forever_do_not_hold_the_stall_timer(scripted, run_async):
    """Regression: a server sending empty `{"role": "assistant"}` deltas forever restarted the stall
    timer with each one, so the try lasted until the request timeout. Only text, reasoning and tool-call
    parts count: the try stalls after stall_timeout, is retried, and the next try's answer is taken."""
    srv = scripted({"turns": [{"tool": "submit", "fail": {"stall": 2, "keepalive": 0.1, "times": 1}}]})
    reply, _ = ask(srv, run_async, stream=True, stall_timeout=0.6, timeout=20)
    assert reply.tool_calls[0].name == "submit" and len(srv.requests) == 2
    assert "sent nothing for 0.6 s but" in reply.notes[0] and "chunks without text" in reply.notes[0]
    srv = scripted({"turns": [{"tool": "submit", "fail": {"stall": 1, "keepalive": 0.1, "times": 9}}]})
    with pytest.raises(ModelError, match="sent nothing for 0.5 s but .* chunks without text"):
        ask(srv, run_async, stream=True, stall_timeout=0.5, timeout=20, max_retries=0)


def test_a_stream_cut_short_is_retried(scripted, run_async):
    srv = scripted({"turns": [{"tool": "submit", "fail": {"cut": 300, "length": False, "times": 1}}]})
    # the cut fault answers with the non-streamed body's first bytes: not a stream, so a failed try
    reply, _ = ask(srv, run_async, stream=True)
    assert reply.tool_calls[0].name == "submit" and len(srv.requests) == 2 and reply.notes


@pytest.mark.parametrize("stream", [False, True])
def test_logprobs_are_asked_for_and_recorded_per_token(scripted, run_async, stream):
    srv = scripted({"turns": [{"content": "sixteen characters of text"}]})
    reply, _ = ask(srv, run_async, stream=stream, logprobs=True, top_logprobs=2)
    assert srv.requests[0]["params"]["logprobs"] is True and srv.requests[0]["params"]["top_logprobs"] == 2
    assert "".join(t["token"] for t in reply.logprobs) == "sixteen characters of text"
    assert [t["logprob"] for t in reply.logprobs] == [0.0, -0.25, -0.5, -0.75]
    assert all(t["top"] == dict([(t["token"], t["logprob"])]) for t in reply.logprobs)


def test_without_logprobs_none_are_asked_for(scripted, run_async):
    srv = scripted({"turns": [{"content": "x"}]})
    reply, _ = ask(srv, run_async)
    assert "logprobs" not in srv.requests[0]["params"] and reply.logprobs is None


@pytest.mark.docker
def test_a_streamed_run_shows_tokens_as_they_come_and_records_logprobs(scripted, tmp_path, docker_image):
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": "echo 42 > /testbed/answer.txt"},
                               "content": "Writing the answer now."}, {"tool": "submit"}]})
    res = cli("run", "answer", "--model", "m", "--base-url", srv.url, "--stream", "--logprobs",
              "--out", str(tmp_path / "run"), "--image", docker_image)
    assert res.returncode == 0, res.stderr
    assert "streaming" in res.stdout and "Writing the answer now." in res.stdout and "first token" in res.stdout
    traj = Trajectory.load(tmp_path / "run" / "trajectory.json")
    assert traj.exit_reason == "submitted" and traj.steps[0].time_to_first_token_s is not None
    assert "".join(t["token"] for t in traj.steps[0].logprobs) == "Writing the answer now."
