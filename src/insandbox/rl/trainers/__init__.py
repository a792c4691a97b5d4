"""Trainers: GRPO with TRL (trl_train.py, `insandbox rl train`), GGUF export of its checkpoints
(export.py, `insandbox rl export`); an agent loop and a recipe for verl (verl_agent_loop.py).

    config.py        the training config (YAML, presets/ under it) and its validation
    grpo_args.py     the config as TRL's GRPOConfig
    policy.py        the model and tokenizer to train, EOS and padding aligned with the turn end
    rollout_hook.py  TRL's rollout_func: insandbox rollouts in sandboxes, records kept and checked
    reward_func.py   the reward TRL sees (the records'), and the rollout figures into TRL's log
    metrics.py       one console line and one metrics.jsonl row per step
"""
