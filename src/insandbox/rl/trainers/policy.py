"""The policy to train: a transformers causal LM and its tokenizer, from a folder, a hub name or a
GGUF file (transformers dequantises it), with EOS and padding made to agree with the chat
template's end of turn."""
from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .config import EMBEDDED, ConfigError, TrainConfig


def gguf_path(model: str) -> Path:
    if model == EMBEDDED:
        from ...models.local_server import LocalModelMissing, default_gguf

        try:
            return default_gguf()
        except LocalModelMissing as e:
            raise ConfigError(str(e)) from None
    path = Path(model)
    if not path.is_file():
        raise ConfigError(f"model {model}: no such GGUF file")
    return path


def load_policy_model(config: TrainConfig) -> tuple[Any, Any]:
    """(model, tokenizer), the weights in float32 (AdamW's master copy; autocast does the rest)."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # the console keeps to one line per step
    try:
        return _load(config)
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def _load(config: TrainConfig) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if config.is_gguf():
        from ..rollout.backends import load_gguf_tokenizer

        gguf = gguf_path(config.model)
        tokenizer = load_gguf_tokenizer(gguf)
        with _quiet_gguf_loader():
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    else:
        try:
            tokenizer = AutoTokenizer.from_pretrained(config.model)
        except (OSError, ValueError) as e:
            raise ConfigError(f"model {config.model}: {str(e).splitlines()[0]}") from None
        model = AutoModelForCausalLM.from_pretrained(config.model, dtype=torch.float32)
    return model, tokenizer


@contextmanager
def _quiet_gguf_loader() -> Iterator[None]:
    """transformers' GGUF loader draws its own tqdm bar, which its progress-bar switch does not reach."""
    import transformers.modeling_gguf_pytorch_utils as loader

    bar = getattr(loader, "tqdm", None)
    if bar is not None:
        loader.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        if bar is not None:
            loader.tqdm = bar


def align_turn_end(model: Any, tokenizer: Any, stop_token_ids: list[int]) -> None:
    """Make the tokenizer's EOS the token that ends an assistant turn, and give it a pad token.

    TRL decides whether a completion was cut off by its last token (EOS or pad), pads with the pad
    token, and a saved checkpoint should stop generating where a turn ends. A GGUF's metadata may
    name another EOS (SmolLM2's says <|im_start|>); the chat format found the real one from the
    template."""
    stop = stop_token_ids[0]
    stop_text = tokenizer.convert_ids_to_tokens(stop)
    if tokenizer.eos_token_id != stop:
        tokenizer.eos_token = stop_text
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = stop_text
    eos = stop_token_ids[0] if len(stop_token_ids) == 1 else list(stop_token_ids)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.config.eos_token_id = eos
    model.config.pad_token_id = tokenizer.pad_token_id
