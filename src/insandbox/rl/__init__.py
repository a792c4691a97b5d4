"""LLM-in-Sandbox-RL: train a model to use the computer, with rollouts in real sandboxes.

    data/      `insandbox rl build-data`: public reading-comprehension sources -> context tasks
               (one reader per source format), material as files, distractors, a manifest
    rewards/   outcome rewards, one per qa_type, with optional penalties; never hang or raise
    rollout/   token in, token out: the policy's sampler drives SandboxEnv episodes; records keep
               the sampled ids, a response mask and the trajectory
    trainers/  GRPO with TRL on one machine; an agent loop and a recipe for verl on a cluster
    schema.py  the training row every part agrees on

It sits on top of env.py and the tools, beside bench/: it reuses bench's scorers, never the
reverse.
"""
