"""Token-in, token-out rollouts in real sandboxes.

    rollouts = Rollouts(tokenizer, RolloutConfig(max_steps=8), RewardConfig())
    record = await rollouts.run(row, generate)                   # one rollout of one task row
    records = await rollouts.run_groups(rows, generate, n=8, concurrency=32)   # GRPO groups
    problems = check_record(record, rollouts.chat)               # [] when ids decode to the conversation
    result = await rollouts.run_all(rows, generate, Path("out"), n=8)  # out/rollouts.jsonl, out/summary.json

`generate(context_ids, SamplingParams) -> Sampled` is the policy's own sampler: vLLM or SGLang
behind verl, the trainer's model in TRL, llama.cpp or transformers on a CPU (see backends/).
"""
from .chat import ChatFormat, ChatTemplateError
from .check import check_record
from .output import RolloutsResult, RolloutWriter, write_rollouts
from .runner import RolloutConfig, Rollouts
from .staleness import StalenessSplit, split_stale
from .summary import summarize
from .types import GenerateFn, RolloutRecord, Sampled, SamplingParams

__all__ = ["ChatFormat", "ChatTemplateError", "GenerateFn", "RolloutConfig", "RolloutRecord", "RolloutWriter",
           "Rollouts", "RolloutsResult", "Sampled", "SamplingParams", "StalenessSplit", "check_record", "split_stale",
           "summarize", "write_rollouts"]
