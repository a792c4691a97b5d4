"""Trainers: GRPO with TRL (trl.py), an agent loop and a recipe for verl (verl_agent_loop.py)."""
