"""Trainers: GRPO with TRL on one machine (`insandbox rl train`), GGUF export of its checkpoints
(`insandbox rl export`), and an agent loop for verl on a Ray cluster (recipes/verl/).

    config.py            the training config (YAML, presets/ under it) and its validation
    grpo_args.py         the config as TRL's GRPOConfig
    policy.py            the model and tokenizer to train, EOS and padding aligned with the turn end
    policy_sampler.py    the trainer's model as the rollout sampler, with a prefix cache
    rollout_hook.py      TRL's rollout_func: insandbox rollouts in sandboxes, records kept and checked
    reward_func.py       the reward TRL sees (the records'; None for a masked rollout), and the rollout
                         figures into TRL's log
    trl_trainer.py       GRPOTrainer with RLOO advantages over each group's scored rollouts
    metrics.py           one console line and one metrics.jsonl row per step
    trl_train.py         the training run itself
    export.py            a checkpoint as GGUF, through llama.cpp's converter
    command.py           the `rl train` and `rl export` commands
    verl_agent_loop.py   verl's AgentLoopBase, registered as "insandbox"
    verl_advantage.py    RLOO without masked rollouts, registered with verl as "insandbox_rloo"
    verl_metrics.py      verl's logged critic/score and critic/rewards without the masked rollouts
    verl_sampler.py      verl's server manager as a rollout sampler
    verl_data.py         task rows as verl's parquet (`insandbox rl verl-data`)
    verl_cpu_server.py   a CPU generation server speaking verl's interface (tests, no GPU)
"""
