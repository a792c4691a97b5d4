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



def test_cost_of_samples_in_all_per_sample_and_per_correct_answer():
    from insandbox.analysis.accounting import cost_summary

    records = [{"score": 1.0, "cost_usd": 0.5, "error": None},
               {"score": 0.0, "cost_usd": 0.25, "retry_cost_usd": 0.5, "error": None},
               {"score": None, "cost_usd": 0.75, "error": "sandbox_error: gone"},  # paid for, counts in all
               {"score": 1.0, "cost_usd": None, "error": None}]  # written without a price: apart, not as 0
    assert cost_summary(records) == {"cost_usd": 2.0, "cost_per_sample_usd": 0.375,
                                     "cost_per_correct_usd": 2.0, "cost_unknown": 1}
    assert cost_summary([{"score": 1.0}]) == {"cost_usd": None, "cost_per_sample_usd": None,
                                              "cost_per_correct_usd": None, "cost_unknown": 1}
    assert cost_summary([{"score": 0.0, "cost_usd": 0.1}])["cost_per_correct_usd"] is None  # nothing right
