"""The embedded model's server returns the token ids of the prompt and of the reply, and each sampled
token's log probability, when a request asks as vLLM's are asked (`return_token_ids`): what a
token-recording gateway needs from its upstream. The real GGUF model, in this process."""
from __future__ import annotations

import pytest

from insandbox.models.local_server import LocalModel, default_gguf

TOOLS = [{"type": "function", "function": {"name": "execute_bash", "description": "Run a command.", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]


@pytest.fixture(scope="module")
def model():
    return LocalModel(default_gguf(), n_ctx=2048)


@pytest.mark.parametrize("tools", [None, TOOLS])
def test_token_ids_and_logprobs_of_a_greedy_reply(model, tools):
    req = {"messages": [{"role": "user", "content": "List the files in /testbed."}], "max_tokens": 40,
           "temperature": 0.0, "seed": 1, "tools": tools}
    code, plain = model.chat(dict(req))
    code_ids, body = model.chat({**req, "return_token_ids": True})
    assert code == code_ids == 200
    choice = body["choices"][0]
    ids, lps = choice["token_ids"], choice["logprobs"]["content"]
    assert len(body["prompt_token_ids"]) == body["usage"]["prompt_tokens"] > 10
    assert len(ids) == len(lps) == body["usage"]["completion_tokens"] > 0
    assert all(lp["logprob"] <= 0.0 for lp in lps)
    assert model.llama.detokenize(body["prompt_token_ids"], special=True).decode().endswith("assistant\n")
    # the same model, the same greedy choice: the reply is the one the plain path gives
    assert choice["message"] == {**plain["choices"][0]["message"],
                                 **({"tool_calls": choice["message"].get("tool_calls")} if tools else {})}
    if tools:
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["tool_calls"][0]["function"]["name"] == "execute_bash"


def test_a_prompt_past_the_context_is_refused_in_vllms_words(model):
    code, body = model.chat({"messages": [{"role": "user", "content": "word " * 3000}], "max_tokens": 10,
                             "return_token_ids": True})
    assert code == 400 and body["error"]["code"] == "context_length_exceeded"


def test_a_completion_of_token_ids_answers_as_vllm_does(model):
    prompt = model.llama.tokenize(b"<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n", add_bos=False,
                                  special=True)
    im_end = model.llama.tokenize(b"<|im_end|>", add_bos=False, special=True)[0]
    code, body = model.complete({"prompt": prompt, "max_tokens": 30, "logprobs": 0, "return_token_ids": True,
                                 "stop_token_ids": [im_end]})
    assert code == 200
    choice = body["choices"][0]
    ids, lps = choice["token_ids"], choice["logprobs"]["token_logprobs"]
    assert choice["prompt_token_ids"] == prompt
    assert len(ids) == len(lps) == body["usage"]["completion_tokens"] > 0 and all(lp <= 0 for lp in lps)
    if choice["finish_reason"] == "stop":  # the stop token is among the ids, not in the text
        assert ids[-1] == im_end and "<|im_end|>" not in choice["text"]
    assert choice["text"] == model.llama.detokenize([t for t in ids if t != im_end]).decode()
    # greedy and the same ids: the same completion
    assert model.complete({"prompt": prompt, "max_tokens": 30, "stop_token_ids": [im_end]})[1]["choices"][0][
        "token_ids"] == ids


@pytest.mark.parametrize("prompt", [[], [-1], [10 ** 9], ["a"], [True], {"a": 1}])
def test_a_completion_refuses_a_prompt_that_is_not_token_ids(model, prompt):
    code, body = model.complete({"prompt": prompt, "max_tokens": 3})
    assert code == 400 and "prompt" in body["error"]["message"]


def test_a_completion_stops_when_its_client_is_gone(model):
    prompt = model.llama.tokenize(b"<|im_start|>user\nCount to one hundred.<|im_end|>\n<|im_start|>assistant\n",
                                  add_bos=False, special=True)
    code, body = model.complete({"prompt": prompt, "max_tokens": 200, "ignore_eos": True}, gone=lambda: True)
    assert code == 200 and body["choices"][0]["finish_reason"] == "length"
    assert len(body["choices"][0]["token_ids"]) == 16  # checked every 16 tokens
