"""Rollout throughput and fidelity: token-level rollouts in real sandboxes.

    .venv/bin/python benchmarks/bench_rollouts.py                 # everything below
    .venv/bin/python benchmarks/bench_rollouts.py --skip-embedded # the scripted model only

1. A scripted model answering after 1 s a call (3 turns: read the documents, write the answer,
   submit): rollouts per minute at 8 and 32 concurrent sandboxes against the ideal (latency-bound),
   and the sandbox share of rollout time. What the environment costs.
2. The embedded model (SmolLM2-135M through llama.cpp, one model serving every rollout) at 8 and
   32 concurrent sandboxes: rollouts per minute, the sampler's and the sandbox's share.
3. The decode check over --check-n rollouts of the embedded model: decoding each record's ids
   gives back the conversation the environment saw (mismatches must be 0).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time

from insandbox.rl.rewards import RewardResult
from insandbox.rl.rollout import RolloutConfig, Rollouts, check_record, summarize
from insandbox.rl.rollout.backends import load_policy
from insandbox.rl.rollout.backends.scripted import ScriptedGenerator


def rows(n: int) -> list[dict]:
    return [{"id": f"bench-{i}", "qa_type": "single-choice", "options": ["A", "B", "C", "D"], "ground_truth": "C",
             "problem_statement": f"Question {i}: which option does the material name? Options: A, B, C, D. The "
                                  "material is in /testbed/documents. Write the letter to /testbed/answer.txt.",
             "input_files": {f"doc_{k:02d}.txt": ("The option is C.\n" if k == 1 else f"Filler text {k}.\n") * 20
                             for k in range(1, 5)}} for i in range(n)]


async def reward(row, outcome, config):
    correct = float((outcome.answer or "").strip() == row["ground_truth"])
    return RewardResult(value=correct, correct=correct)


def call(name: str, **args) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'


async def scripted(tokenizer, concurrency: int, per_slot: int, image: str) -> dict:
    r = Rollouts(tokenizer, RolloutConfig(max_steps=4, image=image), reward_fn=reward)
    read = "grep -l 'option is' /testbed/documents/* && cat /testbed/documents/doc_01.txt"
    turns = [call("execute_bash", command=read), call("execute_bash", command="echo C > /testbed/answer.txt"),
             call("submit")]
    gen = ScriptedGenerator(r.chat, [{"turns": turns}], latency=1.0)
    batch = rows(concurrency * per_slot)
    t0 = time.perf_counter()
    records = await r.run_groups(batch, gen, n=1, concurrency=concurrency)
    s = summarize(records, time.perf_counter() - t0)
    ideal = concurrency * 60 / len(turns)  # every rollout is 3 model calls of 1 s
    mismatches = sum(bool(check_record(x, r.chat)) for x in records)
    return {**s, "ideal_per_min": ideal, "of_ideal": s["rollouts_per_min"] / ideal,
            "correct": sum(x.reward for x in records), "mismatches": mismatches}


async def embedded(tokenizer, generate, concurrency: int, n_rollouts: int, image: str, max_turns: int = 2,
                   tokens: int = 48) -> tuple[dict, list]:
    r = Rollouts(tokenizer, RolloutConfig(max_steps=max_turns, max_tokens=tokens, max_response_tokens=1024,
                                          image=image), reward_fn=reward)
    t0 = time.perf_counter()
    records = await r.run_groups(rows(n_rollouts), generate, n=1, concurrency=concurrency)
    s = summarize(records, time.perf_counter() - t0)
    problems = [(x.id, check_record(x, r.chat)) for x in records]
    return {**s, "mismatches": sum(1 for _, p in problems if p)}, [p for p in problems if p[1]]


def table(title: str, rows_: list[tuple]) -> None:
    print(f"\n{title}")
    widths = [max(len(str(r[i])) for r in rows_) for i in range(len(rows_[0]))]
    for r in rows_:
        print("  ".join(str(c).rjust(w) for c, w in zip(r, widths)))


async def main(a) -> None:
    from insandbox.config import RunConfig
    from insandbox.runs.session import prepare_sandbox

    await prepare_sandbox(RunConfig(image=a.image))
    t = time.perf_counter()
    tokenizer, generate = load_policy(seed=a.seed)
    print(f"embedded model and tokenizer loaded in {time.perf_counter() - t:.1f} s")
    out = [("concurrency", "rollouts", "rollouts/min", "ideal", "of ideal", "sandbox share", "mismatches")]
    for c in (8, 32):
        s = await scripted(tokenizer, c, a.per_slot, a.image)
        out.append((c, s["rollouts"], f"{s['rollouts_per_min']:.1f}", f"{s['ideal_per_min']:.0f}",
                    f"{s['of_ideal']:.0%}", f"{s['sandbox_share']:.1%}", s["mismatches"]))
    table("scripted model, 1 s per call, 3 calls per rollout", out)
    if a.skip_embedded:
        return
    out = [("concurrency", "rollouts", "rollouts/min", "sampler share", "sandbox share", "turns", "model tokens")]
    for c in (8, 32):
        s, _ = await embedded(tokenizer, generate, c, c * 2, a.image)
        out.append((c, s["rollouts"], f"{s['rollouts_per_min']:.1f}", f"{s['generate_share']:.1%}",
                    f"{s['sandbox_share']:.1%}", f"{s['turns_per_rollout']:.1f}", f"{s['model_tokens_mean']:.0f}"))
    table("embedded model (SmolLM2-135M, llama.cpp, 2 turns of at most 48 tokens)", out)
    s, problems = await embedded(tokenizer, generate, 16, a.check_n, a.image)
    print(f"\ndecode check: {s['rollouts']} rollouts of the embedded model, {s['mismatches']} mismatches "
          f"({s['response_tokens_mean']:.0f} response tokens on average, {s['model_tokens_mean']:.0f} sampled)")
    for rid, p in problems[:5]:
        print("  ", rid, p[0][:200])


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", default="insandbox:latest")
    ap.add_argument("--per-slot", type=int, default=2, help="scripted rollouts per concurrency slot")
    ap.add_argument("--check-n", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-embedded", action="store_true")
    asyncio.run(main(ap.parse_args()))
