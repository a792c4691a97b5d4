"""A real TRL GRPO run in seconds, for the trainers' tests: a tiny randomly initialised Llama, a word-level
tokenizer made here, TRL's GRPOTrainer through InSandboxGRPOTrainer and the rollout hook, and scripted
rollouts in place of sandboxes: each rollout is two turns sampled by the hook's real sampler with a
fixed observation between them (seeded per rollout and turn, so a run is deterministic), its reward a
function of its tokens."""
from __future__ import annotations

import asyncio
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import torch

from insandbox.rl.rollout.types import RolloutRecord, SamplingParams

EOS, PAD, OBSERVATION = 1, 0, [3, 4, 5]
TASKS = ["a", "b", "c", "d"]


def tokenizer() -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": PAD, "<eos>": EOS, "<unk>": 2, **{f"t{i}": i + 3 for i in range(61)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def model(seed: int = 0) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         eos_token_id=EOS, pad_token_id=PAD)
    m = LlamaForCausalLM(config)
    m.generation_config.eos_token_id = EOS
    m.generation_config.pad_token_id = PAD
    return m


def rows() -> dict[str, dict]:
    return {t: {"id": t, "prompt_ids": [10 + i, 20 + i, 30 + i, 40 + i]} for i, t in enumerate(TASKS)}


class ScriptedRollouts:
    """Stands in for Rollouts: same run_groups, no sandboxes."""

    def __init__(self, turn_tokens: int = 4):
        # check_record finds no trajectory in these records: counted as mismatches, harmless
        self.chat = SimpleNamespace(stop_token_ids=[EOS], tokenizer=None)
        self.tokenizer = None
        self.pool = None
        self.turn_tokens = turn_tokens
        self.calls: list[tuple[str, int, int, Optional[int]]] = []  # (task, sample, turn, version) per generate

    async def run_groups(self, rows: list[dict], generate: Any, n: int = 8, concurrency: int = 1,
                         on_record: Any = None) -> list[RolloutRecord]:
        return list(await asyncio.gather(*(self.one(row, g, s, generate) for g, row in enumerate(rows)
                                           for s in range(n))))

    async def one(self, row: dict, group: int, sample: int, generate: Any) -> RolloutRecord:
        prompt = list(row["prompt_ids"])
        ids: list[int] = []
        mask: list[int] = []
        logprobs: list[Optional[float]] = []
        versions: list[Optional[int]] = []
        for turn in range(2):
            if turn:
                ids += OBSERVATION
                mask += [0] * len(OBSERVATION)
                logprobs += [None] * len(OBSERVATION)
            seed = 1000 * (TASKS.index(row["id"]) + 1) + 10 * sample + turn
            params = SamplingParams(max_tokens=self.turn_tokens, temperature=1.0, stop_token_ids=[EOS], seed=seed)
            sampled = await generate(prompt + ids, params)
            self.calls.append((row["id"], sample, turn, sampled.policy_version))
            ids += sampled.token_ids
            mask += [1] * len(sampled.token_ids)
            logprobs += list(sampled.logprobs or [])
            versions.append(sampled.policy_version)
        reward = float(sum(t for t, m in zip(ids, mask) if m) % 5)
        known = [v for v in versions if v is not None]
        return RolloutRecord(id=f"{row['id']}/g{group}/s{sample}", task_id=row["id"], group=group, sample=sample,
                             prompt_ids=prompt, response_ids=ids, response_mask=mask, response_logprobs=logprobs,
                             reward=reward, exit_reason="submitted", num_turns=2, policy_versions=versions,
                             policy_version=min(known) if len(known) == len(versions) else None,
                             timings={"wall_s": 0.01, "generate_s": 0.01, "env_s": 0.0})


def config(out: Path, **grpo: Any) -> Any:
    from insandbox.rl.trainers.config import TrainConfig

    settings = {"num_generations": 2, "prompts_per_step": 2, "micro_batch": 2, "max_steps": 3,
                "learning_rate": 1e-2, "weight_decay": 0.0, **grpo}
    return TrainConfig(out=out, grpo=settings, rollout={"temperature": 1.0, "max_response_tokens": 64})


def trainer(out: Path, hook: Any, callbacks: list, trainer_class: Any = None, seed: int = 0, **grpo: Any) -> Any:
    """A GRPO trainer over the scripted rollouts (TRL's own seed, shuffling and loss)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from transformers import PrinterCallback, ProgressCallback
    from trl import GRPOConfig

    from insandbox.rl.trainers.grpo_args import grpo_kwargs
    from insandbox.rl.trainers.reward_func import make_reward_func
    from insandbox.rl.trainers.trl_trainer import InSandboxGRPOTrainer

    cfg = config(out, **grpo)
    args = GRPOConfig(**grpo_kwargs(cfg, out, 1, use_cpu=True))
    cls = trainer_class or InSandboxGRPOTrainer
    extra = {"importance_cap": cfg.grpo.importance_cap} if cls is InSandboxGRPOTrainer else {}
    t = cls(model=model(seed), reward_funcs=[make_reward_func(hook)], args=args,
            train_dataset=Dataset.from_list([{"prompt": task} for task in TASKS]), processing_class=tokenizer(),
            hook=hook, advantage=cfg.grpo.advantage, callbacks=callbacks, **extra)
    for noisy in (PrinterCallback, ProgressCallback):
        t.remove_callback(noisy)
    return t
