"""The token record of a rollout, pinned: ids, masks and logprobs exactly as the rollout gave them
before it ran through agent.loop (golden_rollouts.json was written by the former runner, its own
loop). A deterministic sampler (scripted turns, logprobs from the context length) over real
sandboxes; the cases cover a submit, a nudge, turns cut by max_tokens, a turn cut by the
response budget (its calls not run) and an observation past the budget.

Regenerate only on purpose: PYTHONPATH=src python -m tests.rl.rollout.test_token_identity --write
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from insandbox.rl.rollout import RolloutConfig, Rollouts, Sampled, check_record
from insandbox.rl.rollout.backends.scripted import ScriptedGenerator

GOLDEN = Path(__file__).with_name("golden_rollouts.json")
ROW = {"id": "task-1", "problem_statement": "Which is right, A or B? The material is in /testbed/documents.",
       "ground_truth": "B", "input_files": {"doc_01.txt": "The right one is B.\n", "doc_02.txt": "Unrelated.\n"},
       "qa_type": "single-choice", "options": ["A", "B"]}


def call(name: str, **args) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'


CASES = {
    # submits after reading, writing and one turn without a call (nudged)
    "submit": (dict(max_steps=6),
               ["Let me look.\n" + call("execute_bash", command="cat /testbed/documents/doc_01.txt"),
                call("str_replace_editor", command="create", path="/testbed/answer.txt", file_text="B"),
                "I think I know it now.",
                call("submit")]),
    # every turn cut by max_tokens (no end-of-turn token), until the budget ends it
    "per_turn_cut": (dict(max_steps=10, max_response_tokens=200, max_tokens=40), ["word " * 100] * 10),
    # the last turn runs past the response budget: cut mid-turn, its (complete) call not run
    "mid_turn": (dict(max_steps=3, max_response_tokens=300, max_tokens=8192),
                 [call("execute_bash", command="echo B > /testbed/answer.txt"),
                  call("execute_bash", command="echo A > /testbed/answer.txt") + "word " * 2000]),
    # a tool's output does not fit the budget: the rollout ends before the observation is added
    "observation": (dict(max_steps=4, max_response_tokens=150, max_tokens=8192),
                    [call("execute_bash", command="echo B > /testbed/answer.txt; seq 1 400")]),
}


class Deterministic:
    """Scripted turns with logprobs that depend only on the context's length and the position."""

    def __init__(self, chat, turns: list[str]):
        self.scripted = ScriptedGenerator(chat, [{"turns": turns}])

    async def __call__(self, context, params) -> Sampled:
        s = await self.scripted(context, params)
        s.logprobs = [-((len(context) * 7 + i * 3) % 17) / 8 for i in range(len(s.token_ids))]
        return s


async def _identity_reward(row, outcome, config):
    from insandbox.rl.rewards import RewardResult

    return RewardResult(value=float((outcome.answer or "").strip() == row["ground_truth"]), detail={})


def pinned(rec, chat) -> dict:
    """What must not change: the token record, and what the trajectory says of each step."""
    traj = rec.trajectory
    return {"prompt_ids": rec.prompt_ids, "response_ids": rec.response_ids, "response_mask": rec.response_mask,
            "response_logprobs": rec.response_logprobs, "truncated": rec.truncated, "num_turns": rec.num_turns,
            "tool_calls": rec.tool_calls, "exit_reason": rec.exit_reason, "exit_detail": rec.exit_detail,
            "reward": rec.reward, "answer": traj["answer"], "check": check_record(rec, chat),
            "messages": traj["messages"],
            "steps": [{k: s[k] for k in ("index", "prompt_tokens", "completion_tokens", "finish_reason", "content",
                                         "notes", "nudged", "tool_calls_from_text")}
                      | {"calls": [(c["name"], c["arguments"], c["output"]) for c in s["tool_calls"]]}
                      for s in traj["steps"]]}


def run_case(tokenizer, image: str, name: str) -> dict:
    import asyncio

    config, turns = CASES[name]
    r = Rollouts(tokenizer, RolloutConfig(image=image, **config), reward_fn=_identity_reward)
    rec = asyncio.run(r.run(ROW, Deterministic(r.chat, turns)))
    return json.loads(json.dumps(pinned(rec, r.chat)))  # tuples as lists, as in the file


@pytest.mark.parametrize("name", list(CASES))
def test_the_token_record_is_byte_identical(smollm_tokenizer, docker_image, name):
    got = run_case(smollm_tokenizer, docker_image, name)
    want = json.loads(GOLDEN.read_text())[name]
    for key in ("prompt_ids", "response_ids", "response_mask", "response_logprobs"):
        assert got[key] == want[key], key
    assert got == want


def test_a_rollout_runs_through_the_agent_loop(smollm_tokenizer, docker_image, monkeypatch):
    """The rollout is agent.loop's episode, the policy its model client; the loop's own code asks and acts."""
    import insandbox.agent.loop as loop
    import insandbox.rl.rollout.runner as runner
    from insandbox.rl.rollout.token_client import TokenClient

    seen, asked = [], []
    ask = loop._ask

    async def spy_episode(env, model, task, traj, *args, **kwargs):
        seen.append(model)
        return await loop.run_episode(env, model, task, traj, *args, **kwargs)

    async def spy_ask(model, *args, **kwargs):
        asked.append(model)
        return await ask(model, *args, **kwargs)

    monkeypatch.setattr(runner, "run_episode", spy_episode)
    monkeypatch.setattr(loop, "_ask", spy_ask)
    got = run_case(smollm_tokenizer, docker_image, "submit")
    assert len(seen) == 1 and isinstance(seen[0], TokenClient) and asked == [seen[0]] * 4
    assert got["exit_reason"] == "submitted" and seen[0].turns == 4 and seen[0].record.response_ids == got[
        "response_ids"]


def test_the_cases_cover_both_truncations():
    want = json.loads(GOLDEN.read_text())
    assert want["mid_turn"]["truncated"] and want["mid_turn"]["exit_detail"].endswith("mid-turn")
    assert want["mid_turn"]["steps"][-1]["calls"] == [] and "1 tool call(s) not run" in want["mid_turn"]["steps"][-1][
        "notes"][0]
    assert want["observation"]["truncated"] and want["observation"]["exit_detail"].endswith("budget of 150 tokens")
    assert want["observation"]["steps"][-1]["calls"]  # the call ran; its output did not fit
    assert want["per_turn_cut"]["truncated"] and want["submit"]["exit_reason"] == "submitted"
    assert all(x["response_logprobs"] is not None for x in want.values())


if __name__ == "__main__" and "--write" in sys.argv:
    from insandbox.models.local_server import default_gguf
    from insandbox.rl.rollout.backends import load_gguf_tokenizer
    from tests.conftest import IMAGE

    tok = load_gguf_tokenizer(default_gguf())
    GOLDEN.write_text(json.dumps({name: run_case(tok, IMAGE, name) for name in CASES}, indent=0) + "\n")
    print(f"wrote {GOLDEN}")
