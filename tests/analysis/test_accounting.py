"""Benchmarks: scorers on the dev sets, each task end to end in both modes, resume, the report."""
from __future__ import annotations


def test_token_accounting_from_a_trajectory():
    from insandbox.analysis.accounting import token_breakdown

    steps = [{"prompt_tokens": 100, "completion_tokens": 10, "observation_chars": 400, "usage_reported": True},
             {"prompt_tokens": 150, "completion_tokens": 20, "observation_chars": 400, "usage_reported": True},
             {"prompt_tokens": 200, "completion_tokens": 5, "observation_chars": 40, "usage_reported": True}]
    t = token_breakdown({"steps": steps})
    # environment = (150 - 100 - 10) + (200 - 150 - 20) = 70; the last observation was never read
    assert t == {"initial_prompt_tokens": 100, "completion_tokens": 35, "env_tokens": 70, "trajectory_tokens": 205,
                 "billed_tokens": 485, "tokens_estimated": False}

