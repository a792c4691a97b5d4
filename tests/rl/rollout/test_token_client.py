"""TokenClient alone (no sandbox): the token record as the loop's messages grow, and the budget's two ends."""
from __future__ import annotations

import asyncio

import pytest

from insandbox.core.episode import ExitReason
from insandbox.models.base import ContextFull
from insandbox.rl.rollout.backends.scripted import ScriptedGenerator
from insandbox.rl.rollout.chat import ChatFormat
from insandbox.rl.rollout.token_client import TokenClient

TOOLS = [{"type": "function", "function": {"name": "execute_bash", "description": "run a command",
                                           "parameters": {"type": "object", "properties": {"command": {
                                               "type": "string"}}}}}]
CALL = '<tool_call>\n{"name": "execute_bash", "arguments": {"command": "ls"}}\n</tool_call>'


def _client(tokenizer, turns, **kw):
    chat = ChatFormat(tokenizer, TOOLS)
    kw = {"max_response_tokens": 4096, "max_tokens_per_turn": 1024, **kw}
    return chat, TokenClient(chat, ScriptedGenerator(chat, [{"turns": turns}]), **kw)


def _messages():
    return [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "List the files."}]


def test_turns_and_observations_make_the_record(smollm_tokenizer):
    chat, client = _client(smollm_tokenizer, ["Looking.\n" + CALL, "Done."])
    messages = _messages()
    reply = asyncio.run(client.complete(messages))
    rec = client.record
    assert rec.prompt_ids == chat.prompt_ids(_messages())
    assert rec.response_ids == chat.encode("Looking.\n" + CALL) + chat.stop_token_ids and set(rec.response_mask) == {1}
    assert reply.tool_calls[0].name == "execute_bash" and reply.tool_calls_from_text and reply.finish_reason == "stop"
    assert reply.usage.prompt_tokens == len(rec.prompt_ids) and reply.ends_episode is None and client.tool_calls == 1
    sampled = len(rec.response_ids)
    messages.append(reply.message)
    results = [{"role": "user", "content": "<tool_response>\na.txt\n</tool_response>"}]
    messages.extend(results)
    reply = asyncio.run(client.complete(messages))
    observation = chat.observation_ids(results, True)
    assert rec.response_ids[sampled:sampled + len(observation)] == observation
    assert rec.response_mask[sampled:] == [0] * len(observation) + [1] * (len(rec.response_ids) - sampled
                                                                         - len(observation))
    assert rec.response_logprobs is None and reply.content == "Done." and client.turns == 2


def test_the_budget_ends_the_episode_mid_turn_or_before_an_observation(smollm_tokenizer):
    chat, client = _client(smollm_tokenizer, [CALL + "word " * 200], max_response_tokens=60)
    reply = asyncio.run(client.complete(_messages()))
    assert reply.ends_episode == (ExitReason.CONTEXT_LENGTH, "the response reached its budget of 60 tokens mid-turn")
    assert reply.notes == ["cut at the response budget: 1 tool call(s) not run"] and client.tool_calls == 0
    assert client.record.truncated and len(client.record.response_ids) == 60

    chat, client = _client(smollm_tokenizer, [CALL], max_response_tokens=60)
    messages = _messages()
    reply = asyncio.run(client.complete(messages))
    assert reply.ends_episode is None and not client.record.truncated
    messages += [reply.message, {"role": "user", "content": "<tool_response>\n" + "x " * 100 + "</tool_response>"}]
    with pytest.raises(ContextFull, match="budget of 60 tokens$"):
        asyncio.run(client.complete(messages))
    assert client.record.truncated and set(client.record.response_mask) == {1}  # the observation was not added


def test_a_conversation_rewritten_between_turns_is_refused(smollm_tokenizer):
    chat, client = _client(smollm_tokenizer, [CALL, CALL])
    messages = _messages()
    reply = asyncio.run(client.complete(messages))
    messages.append(dict(reply.message))  # not the message the client gave
    with pytest.raises(RuntimeError, match="can only grow"):
        asyncio.run(client.complete(messages))
