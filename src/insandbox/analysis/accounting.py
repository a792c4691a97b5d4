"""Token and time accounting of one run, from its trajectory (a dict as saved).

- initial prompt tokens: the first request (system prompt, task, tool schemas);
- completion tokens: everything the model generated;
- environment tokens: what the tools sent back that the model then read. Measured with the
  server's own tokenizer as the growth of the prompt between two calls, minus the previous
  completion (so it includes the chat template's few tokens around each message); estimated
  from characters (4 per token) where the server reported no usage. The last observation is
  not counted: no model call read it;
- trajectory tokens: the sum of the three, the size of the final conversation;
- billed tokens: prompt + completion summed over all calls (what an API charges).

And the cost of benchmark samples, from their records (`cost_summary`): a record's `cost_usd` is
what its trajectory cost, `retry_cost_usd` what the failed attempts before it cost. Samples whose
price is unknown have `cost_usd` None: they are counted apart, never as 0.
"""
from __future__ import annotations


def token_breakdown(traj: dict) -> dict:
    steps = traj.get("steps") or []
    zero = {"initial_prompt_tokens": 0, "completion_tokens": 0, "env_tokens": 0, "trajectory_tokens": 0,
            "billed_tokens": 0, "tokens_estimated": False}
    if not steps:
        return zero
    initial = steps[0].get("prompt_tokens", 0)
    completion = sum(s.get("completion_tokens", 0) for s in steps)
    env, estimated = 0, not all(s.get("usage_reported", True) for s in steps)
    for prev, cur in zip(steps, steps[1:]):
        if prev.get("usage_reported", True) and cur.get("usage_reported", True):
            env += max(cur["prompt_tokens"] - prev["prompt_tokens"] - prev["completion_tokens"], 0)
        else:
            env += prev.get("observation_chars", 0) // 4
    billed = sum(s.get("prompt_tokens", 0) + s.get("completion_tokens", 0) for s in steps)
    return {"initial_prompt_tokens": initial, "completion_tokens": completion, "env_tokens": env,
            "trajectory_tokens": initial + completion + env, "billed_tokens": billed, "tokens_estimated": estimated}


def time_breakdown(traj: dict) -> dict:
    totals = traj.get("totals") or {}
    return {"model_time_s": totals.get("model_time_s", 0.0), "tool_time_s": totals.get("tool_time_s", 0.0),
            "wall_time_s": totals.get("wall_time_s", 0.0)}


def cost_summary(records: list[dict]) -> dict:
    """The cost of these samples: in all (retries included), per sample and per correct answer (samples
    that did not fail for infrastructure reasons); None where no sample has a price."""
    priced = [r for r in records if r.get("cost_usd") is not None]
    out = {"cost_usd": None, "cost_per_sample_usd": None, "cost_per_correct_usd": None,
           "cost_unknown": len(records) - len(priced)}
    if not priced:
        return out
    total = sum(r["cost_usd"] + (r.get("retry_cost_usd") or 0.0) for r in priced)
    ok = [r for r in priced if not r.get("error")]
    correct = sum(float(r["score"]) for r in ok if r.get("score") is not None)
    out.update(cost_usd=round(total, 8),
               cost_per_sample_usd=round(sum(r["cost_usd"] for r in ok) / len(ok), 8) if ok else None,
               cost_per_correct_usd=round(total / correct, 8) if correct else None)
    return out
