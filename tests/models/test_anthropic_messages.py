"""The Anthropic Messages API client, over real HTTP against the scripted server speaking that API
(which refuses what the real API refuses: unanswered tool calls, thinking blocks missing or altered
on a tool-use turn, a missing max_tokens, too many cache breakpoints)."""
from __future__ import annotations

import asyncio
import json

import pytest

from insandbox import Trajectory, arun
from insandbox.models import ContextLengthError, ModelError
from insandbox.models.anthropic_messages import AnthropicClient, ModelRefused, api_root, to_messages
from tests.helpers import cli

TOOLS = [{"type": "function", "function": {"name": n, "description": n, "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}}}} for n in ("execute_bash", "submit")]
FAST = (0.02, 0.1)
THINK_AND_CALL = {"turns": [
    {"tool_calls": [{"name": "execute_bash", "arguments": {"command": "ls"}},
                    {"name": "execute_bash", "arguments": {"command": "pwd"}}],
     "content": "Looking around.", "reasoning_content": "I should list the files first."},
    {"tool": "submit", "reasoning_content": "That is enough."}]}


def conversation(turns: int, client: AnthropicClient, run_async, system: str = "You are careful. " * 300):
    """Play `turns` model turns, answering every tool call; returns the replies."""
    async def go():
        messages = [{"role": "system", "content": system}, {"role": "user", "content": "list the files"}]
        replies = []
        try:
            for _ in range(turns):
                reply = await asyncio.wait_for(client.complete(messages, TOOLS), 30)
                replies.append(reply)
                messages.append(reply.message)
                messages.extend({"role": "tool", "tool_call_id": c.id, "content": f"output of {c.arguments}"}
                                for c in reply.tool_calls)
        finally:
            await client.close()
        return replies
    return run_async(go())


# ------------------------------------------------------------------------ the conversation's shape

def test_history_becomes_system_blocks_and_tool_results_before_text_with_every_call_answered():
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "thinking_blocks": [{"type": "thinking", "thinking": "t",
                                                                    "signature": "s"}],
         "tool_calls": [{"id": "a", "type": "function", "function": {"name": "execute_bash", "arguments": '{"x": 1}'}},
                        {"id": "b", "type": "function", "function": {"name": "submit", "arguments": "{}"}}]},
        {"role": "user", "content": "a nudge that came before the result"},
        {"role": "tool", "tool_call_id": "a", "content": "ok"},
    ]
    system, out = to_messages(messages)
    assert system == [{"type": "text", "text": "be brief"}]
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert [b["type"] for b in out[1]["content"]] == ["thinking", "tool_use", "tool_use"]
    assert out[1]["content"][1]["input"] == {"x": 1}
    answer = out[2]["content"]
    # b never ran: answered with an error result; results first, then the text
    assert [(b["type"], b.get("tool_use_id"), b.get("is_error")) for b in answer] == [
        ("tool_result", "b", True), ("tool_result", "a", None), ("text", None, None)]


def test_api_root_takes_the_openai_style_base_url():
    assert api_root("http://127.0.0.1:8080/v1") == "http://127.0.0.1:8080"
    assert api_root("https://api.anthropic.com/") == "https://api.anthropic.com"
    assert api_root(None) is None


# ------------------------------------------------------------------------ against the server

@pytest.mark.parametrize("stream", [False, True])
def test_thinking_and_parallel_tool_calls_go_back_as_the_api_requires(scripted, run_async, stream):
    srv = scripted(THINK_AND_CALL)
    deltas = []
    client = AnthropicClient("claude-test", base_url=srv.url, thinking_budget=2048, stream=stream, backoff=FAST)
    client.on_delta = lambda kind, text: deltas.append((kind, text))
    first, second = conversation(2, client, run_async)
    assert [c.name for c in first.tool_calls] == ["execute_bash", "execute_bash"]
    assert json.loads(first.tool_calls[1].arguments) == {"command": "pwd"}
    assert first.reasoning == "I should list the files first." and first.content == "Looking around."
    assert first.finish_reason == "tool_calls" and second.tool_calls[0].name == "submit"
    # the second request carried the thinking block back, signed, first in its turn (the server checks)
    sent = srv.requests[1]
    assert all(r["status"] == 200 for r in srv.requests)
    assert sent["messages"][1]["content"][0]["type"] == "thinking"
    assert sent["params"]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert sent["params"]["max_tokens"] > 2048
    if stream:
        assert first.streamed and first.ttft_s is not None and 0 <= first.ttft_s <= first.latency_s
        assert "".join(t for k, t in deltas if k == "reasoning").startswith("I should list the files first.")
    else:
        assert first.ttft_s is None and not deltas


def test_the_server_refuses_a_tool_turn_whose_thinking_was_dropped(scripted, run_async):
    """The check the test above relies on is real: without the thinking block, a 400."""
    srv = scripted(THINK_AND_CALL)
    client = AnthropicClient("claude-test", base_url=srv.url, thinking_budget=2048, backoff=FAST)

    async def go():
        messages = [{"role": "user", "content": "go"}]
        reply = await client.complete(messages, TOOLS)
        stripped = {k: v for k, v in reply.message.items() if k != "thinking_blocks"}
        messages += [stripped] + [{"role": "tool", "tool_call_id": c.id, "content": "x"} for c in reply.tool_calls]
        try:
            await client.complete(messages, TOOLS)
        finally:
            await client.close()
    with pytest.raises(ModelError, match="rejected the request \\(400\\).*Expected `thinking`"):
        run_async(go())


def test_prompt_caching_reads_the_prefix_back_over_a_20_step_run(scripted, run_async):
    turns = [{"tool": "execute_bash", "args": {"command": f"echo {i}"}} for i in range(20)]
    cached = conversation(20, AnthropicClient("claude-test", base_url=scripted({"turns": turns}).url), run_async)
    plain = conversation(20, AnthropicClient("claude-test", base_url=scripted({"turns": turns}).url,
                                             prompt_caching=False), run_async)
    assert all(r.usage.cached_tokens == 0 and r.usage.cache_write_tokens == 0 for r in plain)
    assert cached[0].usage.cached_tokens == 0 and cached[0].usage.cache_write_tokens > 1000  # the system prompt
    for r in cached[1:]:  # every later step reads all but the newest turn from the cache
        assert r.usage.cached_tokens > 0.8 * r.usage.prompt_tokens
    # same prompts either way: the cache changes the bill, not what the model sees
    assert [r.usage.prompt_tokens for r in cached] == pytest.approx([r.usage.prompt_tokens for r in plain], rel=0.05)
    share = sum(r.usage.cached_tokens for r in cached) / sum(r.usage.prompt_tokens for r in cached)
    assert share > 0.85


def test_overloaded_and_rate_limited_answers_are_retried_honouring_retry_after(scripted, run_async):
    srv = scripted({"turns": [{"tool": "submit", "fail": {"status": [529, 429], "times": 2,
                                                         "headers": {"retry-after": "0.3"}}}]})
    [reply] = conversation(1, AnthropicClient("claude-test", base_url=srv.url, backoff=FAST), run_async)
    assert [r["status"] for r in srv.requests] == [529, 429, 200]
    assert "overloaded (529)" in reply.notes[0] and "(Retry-After)" in reply.notes[0]
    assert "rate limited (429)" in reply.notes[1]
    assert srv.requests[1]["t_recv"] - srv.requests[0]["t_sent"] >= 0.29


def test_a_prompt_too_long_is_context_length(scripted, run_async):
    srv = scripted({"context_window": 50, "turns": [{"tool": "submit"}]})
    with pytest.raises(ContextLengthError, match="prompt is too long"):
        conversation(1, AnthropicClient("claude-test", base_url=srv.url, max_tokens=10), run_async)


@pytest.mark.parametrize("stop, expect", [("max_tokens", "length"), ("refusal", ModelRefused),
                                          ("model_context_window_exceeded", ContextLengthError)])
def test_stop_reasons(scripted, run_async, stop, expect):
    srv = scripted({"turns": [{"content": "partial", "stop_reason": stop}]})
    client = AnthropicClient("claude-test", base_url=srv.url)
    if isinstance(expect, str):
        [reply] = conversation(1, client, run_async)
        assert reply.finish_reason == expect and reply.content == "partial"
    else:
        with pytest.raises(expect):
            conversation(1, client, run_async)


def test_a_stalled_stream_fails_the_try_and_is_retried(scripted, run_async):
    srv = scripted({"turns": [{"tool": "submit", "fail": {"stall": 3, "times": 1}}]})
    client = AnthropicClient("claude-test", base_url=srv.url, stream=True, stall_timeout=0.5, backoff=FAST)
    [reply] = conversation(1, client, run_async)
    assert reply.tool_calls[0].name == "submit" and len(srv.requests) == 2
    assert "stream sent nothing for 0.5 s (3 events had come)" in reply.notes[0]


def test_empty_events_sent_forever_do_not_hold_the_stall_timer(scripted, run_async):
    """Regression: each event restarted the stall timer, so a server sending events with nothing of the
    answer in them (here an empty message_delta; the SDK drops `ping`s itself) forever held the try until the
    request timeout; only parts of the answer count."""
    srv = scripted({"turns": [{"tool": "submit", "fail": {"stall": 1, "keepalive": 0.1, "times": 9}}]})
    client = AnthropicClient("claude-test", base_url=srv.url, stream=True, stall_timeout=0.5, timeout=20,
                             max_retries=0, backoff=FAST)
    with pytest.raises(ModelError, match="sent nothing for 0.5 s but .* events without text"):
        conversation(1, client, run_async)


def test_a_stream_that_keeps_stalling_is_a_clear_error(scripted, run_async):
    srv = scripted({"turns": [{"tool": "submit", "fail": {"stall": 1, "times": 9}}]})
    client = AnthropicClient("claude-test", base_url=srv.url, stream=True, stall_timeout=0.3, max_retries=1,
                             backoff=FAST)
    with pytest.raises(ModelError, match="sent nothing for 0.3 s .*stream stalled x2"):
        conversation(1, client, run_async)


# ------------------------------------------------------------------------ whole runs

@pytest.mark.docker
def test_a_run_through_the_messages_api_records_cache_tokens_and_time_to_first_token(scripted, tmp_path,
                                                                                     docker_image):
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": "echo hi > /testbed/answer.txt"},
                               "reasoning_content": "write it"}, {"tool": "submit"}]})
    res = cli("run", "say hi", "--provider", "anthropic", "--model", "claude-test", "--base-url", srv.url,
              "--thinking-budget", "1024", "--stream", "--out", str(tmp_path / "run"), "--image", docker_image,
              env={"ANTHROPIC_API_KEY": "sk-ant-test"})
    assert res.returncode == 0, res.stderr
    traj = Trajectory.load(tmp_path / "run" / "trajectory.json")
    assert traj.exit_reason == "submitted" and traj.answer.strip() == "hi"
    first, second = traj.steps
    assert first.cache_write_tokens > 0 and second.cached_tokens > 0
    assert first.time_to_first_token_s is not None and first.reasoning == "write it"
    assert "thinking: write it" in res.stdout + res.stderr  # shown as it came
    assert srv.requests[0]["params"]["system"][-1]["cache_control"] == {"type": "ephemeral"}


def test_an_anthropic_prefix_selects_the_api_and_its_key(scripted, tmp_path, run_async, monkeypatch):
    srv = scripted({"turns": [{"content": "the answer is 4"}], "llm_turns": [{"content": "4"}]})
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    monkeypatch.delenv("INSANDBOX_API_KEY", raising=False)
    result = run_async(arun("2+2?", model="anthropic/claude-test", base_url=srv.url, mode="llm",
                            output_dir=tmp_path / "run"))
    assert result.answer == "4" and srv.requests[0]["api"] == "messages"
    assert srv.requests[0]["params"]["model"] == "claude-test"
    assert result.trajectory.config["provider"] is None and result.trajectory.config["api_key_set"]


@pytest.mark.docker
def test_bench_runs_unchanged_through_the_messages_api_in_both_modes(scripted, tmp_path, docker_image):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": f"r{i}", "problem_statement": f"q{i}: Which one?\nA. x\nB. y",
                                        "ground_truth": "B"}) + "\n" for i in (1, 2)))
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": "echo B > /testbed/answer.txt"}},
                              {"tool": "submit"}], "llm_turns": [{"content": "Answer: B"}]})
    run_dir = tmp_path / "run"
    prices = tmp_path / "prices.yaml"  # a loopback server is free unless the user's own table prices it
    prices.write_text("prices:\n  claude-sonnet-4-5: {input: 3, cache_read: 0.3, cache_write: 3.75, output: 15}\n")
    r = cli("bench", "chem", "--data", str(rows), "--mode", "both", "--model", "anthropic/claude-sonnet-4-5",
            "--base-url", srv.url, "--image", docker_image, "--stream", "--out", str(run_dir), "-q",
            "--prices", str(prices), env={"ANTHROPIC_API_KEY": "sk-ant-test"})
    assert r.returncode == 0, r.stderr
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert sorted((x["id"], x["mode"], x["score"]) for x in records) == [
        ("r1", "llm", 1.0), ("r1", "sandbox", 1.0), ("r2", "llm", 1.0), ("r2", "sandbox", 1.0)]
    assert {q["api"] for q in srv.requests} == {"messages"}
    assert all(x["cost_usd"] > 0 for x in records)
    traj = Trajectory.load(run_dir / next(x["trajectory"] for x in records if x["mode"] == "sandbox"))
    s1, s2 = traj.steps  # the second step reads the first one's prefix from the cache, at its own price
    assert s2.cached_tokens > 0 and s1.cache_write_tokens > 0
    assert s2.cost_usd == pytest.approx((s2.cached_tokens * 0.3 + s2.cache_write_tokens * 3.75 + s2.completion_tokens
                                         * 15 + (s2.prompt_tokens - s2.cached_tokens - s2.cache_write_tokens) * 3)
                                        / 1e6)
