"""The prefix-cached sampler gives what sampling without a cache gives, computing only new tokens.
A tiny randomly initialised Llama (a real transformers model, made here) keeps it fast."""
from __future__ import annotations

import asyncio

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from insandbox.rl.rollout.backends.transformers import TransformersGenerator
from insandbox.rl.rollout.types import SamplingParams
from insandbox.rl.trainers.policy_sampler import PrefixCachedSampler


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    return LlamaForCausalLM(config).eval()


GREEDY = SamplingParams(max_tokens=8, temperature=0.0, stop_token_ids=[299])


def test_cached_turns_match_uncached_sampling(model):
    cached, plain = PrefixCachedSampler(model, pad_token_id=0), TransformersGenerator(model, pad_token_id=0)
    context = list(range(10, 70))
    for turn in range(3):  # a rollout: the context grows by the model's turn and an observation
        a, b = cached.generate(context, GREEDY), plain.generate(context, GREEDY)
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
        context = context + a.token_ids + [100 + turn, 101, 102]
    assert cached.reused > 0
    assert cached.computed == 60 + 2 * 3 + 2  # the prompt once, then each observation and the last sampled token
    cached.close()


def test_a_group_shares_its_prompt(model):
    sampler = PrefixCachedSampler(model, pad_token_id=0)
    prompt = list(range(5, 45))
    params = SamplingParams(max_tokens=6, temperature=1.0, stop_token_ids=[299])

    async def group():
        return await asyncio.gather(*(sampler(prompt, params) for _ in range(4)))

    samples = asyncio.run(group())
    assert all(len(s.token_ids) == len(s.logprobs) for s in samples)
    assert sampler.computed == 40 + 3  # the prompt once; the others reuse all of it but its last token
    assert sampler.reused == 3 * 39
    sampler.close()


def test_kept_caches_stay_within_their_budget(model):
    sampler = PrefixCachedSampler(model, pad_token_id=0, max_cached_tokens=100)
    for start in (0, 50, 100):  # three unrelated contexts of 40 tokens (+ up to 8 sampled)
        sampler.generate(list(range(start + 1, start + 41)), GREEDY)
    assert 1 <= len(sampler.caches) <= 2 and sum(len(k) for k in sampler.caches) <= 100
    sampler.close()


def test_logprobs_are_of_the_distribution_sampled_from(model):
    """At temperature T the recorded logprob is log_softmax(logits / T): what TRL scores, so an importance
    ratio compares like with like."""
    sampler = PrefixCachedSampler(model, pad_token_id=0, version=7)
    context = list(range(10, 30))
    sampled = sampler.generate(context, SamplingParams(max_tokens=4, temperature=0.5, stop_token_ids=[299], seed=3))
    assert sampled.policy_version == 7
    ids = torch.tensor([context + sampled.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(context) - 1:-1].float()
    expected = torch.log_softmax(logits / 0.5, dim=-1).gather(-1, torch.tensor(sampled.token_ids)[:, None])[:, 0]
    assert sampled.logprobs == pytest.approx(expected.tolist(), abs=1e-4)
    raw = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(sampled.token_ids)[:, None])[:, 0]
    assert sampled.logprobs != pytest.approx(raw.tolist(), abs=1e-3)
    sampler.close()
