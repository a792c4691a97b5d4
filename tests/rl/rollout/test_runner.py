"""Rollouts in real sandboxes with a scripted sampler: ids, masks, logprobs, rewards, records."""
from __future__ import annotations

import asyncio
import os

import pytest

from insandbox.rl.rewards import RewardResult
from insandbox.rl.rollout import RolloutConfig, Rollouts, Sampled, check_record
from insandbox.rl.rollout.backends.scripted import ScriptedGenerator
from tests.helpers import containers_with_label, owner_of

ROW = {"id": "task-1", "problem_statement": "Which is right, A or B? The material is in /testbed/documents.",
       "ground_truth": "B", "input_files": {"doc_01.txt": "The right one is B.\n", "doc_02.txt": "Unrelated.\n"},
       "qa_type": "single-choice", "options": ["A", "B"]}


def call(name: str, **args) -> str:
    import json
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'


async def exact_reward(row, outcome, config):
    correct = float((outcome.answer or "").strip() == row["ground_truth"])
    return RewardResult(value=correct - (0.5 if outcome.answer is None else 0.0), correct=correct,
                        detail={"answer": outcome.answer})


def _rollouts(tokenizer, image, **config) -> Rollouts:
    return Rollouts(tokenizer, RolloutConfig(image=image, **config), reward_fn=exact_reward)


def test_a_rollout_keeps_sampled_ids_and_masks_the_environment(smollm_tokenizer, docker_image, run_async):
    r = _rollouts(smollm_tokenizer, docker_image, max_turns=6)
    turns = ["Let me look.\n" + call("execute_bash", command="cat /testbed/documents/doc_01.txt"),
             call("str_replace_editor", command="create", path="/testbed/answer.txt", file_text="B"),
             call("submit")]
    gen = ScriptedGenerator(r.chat, [{"turns": turns}])
    rec = run_async(r.run(ROW, gen))
    assert rec.exit_reason == "submitted" and rec.reward == 1.0 and rec.num_turns == 3 and rec.tool_calls == 3
    assert check_record(rec, r.chat) == []  # decoding the ids gives the conversation the env saw
    # the model's tokens are exactly what the sampler produced, turn by turn; everything else is masked
    model_ids = [t for t, m in zip(rec.response_ids, rec.response_mask) if m]
    assert model_ids == [t for turn in turns for t in r.chat.encode(turn) + r.chat.stop_token_ids]
    env_text = r.chat.decode([t for t, m in zip(rec.response_ids, rec.response_mask) if not m])
    assert "The right one is B." in env_text and "<tool_response>" in env_text and "steps left" in env_text
    assert rec.response_logprobs is None  # the scripted sampler gives none
    traj = rec.trajectory
    assert traj["exit_reason"] == "submitted" and traj["answer"] == "B" and len(traj["steps"]) == 3
    assert traj["steps"][0]["tool_calls"][0]["output"].startswith("The right one is B.")
    assert rec.timings["wall_s"] >= rec.timings["env_s"] > 0


def test_groups_run_concurrently_each_in_its_own_sandbox(smollm_tokenizer, docker_image, run_async):
    r = _rollouts(smollm_tokenizer, docker_image, max_turns=4)
    rows = [dict(ROW, id=f"t{i}", problem_statement=f"Question number {i}. " + ROW["problem_statement"])
            for i in range(3)]
    scripts = [{"match": "Question number 0.", "turns": [call("execute_bash", command="echo B > /testbed/answer.txt"),
                                                         call("submit")]},
               {"match": "Question number 1.", "turns": [call("execute_bash", command="echo A > /testbed/answer.txt"),
                                                         call("submit")]},
               {"turns": ["I will not use tools."] * 4}]
    gen = ScriptedGenerator(r.chat, scripts, latency=0.2)
    seen = []
    records = run_async(r.run_groups(rows, gen, n=2, concurrency=6, on_record=seen.append))
    assert [(x.task_id, x.sample) for x in records] == [(f"t{i}", k) for i in range(3) for k in range(2)]
    assert len(seen) == 6 and {x.group for x in records} == {0, 1, 2}
    by_task = {x.task_id: x for x in records}
    assert by_task["t0"].reward == 1.0 and by_task["t1"].reward == 0.0
    assert by_task["t2"].exit_reason == "max_steps" and by_task["t2"].reward == -0.5 and by_task["t2"].tool_calls == 0
    assert all(check_record(x, r.chat) == [] for x in records)
    assert containers_with_label(owner_of(os.getpid())) == []  # every sandbox of this process removed


def test_the_response_budget_truncates_and_a_cut_turn_is_closed(smollm_tokenizer, docker_image, run_async):
    r = _rollouts(smollm_tokenizer, docker_image, max_turns=10, max_response_tokens=200, max_tokens_per_turn=40)
    gen = ScriptedGenerator(r.chat, [{"turns": ["word " * 100] * 10}])  # every turn runs out of tokens
    rec = run_async(r.run(ROW, gen))
    assert rec.truncated and rec.exit_reason == "context_length" and "budget of 200" in rec.exit_detail
    assert len(rec.response_ids) <= 200
    assert check_record(rec, r.chat) == []  # the cut turns were closed by environment tokens
    first_env = rec.response_mask.index(0)
    assert r.chat.decode(rec.response_ids[first_env:first_env + 3]).startswith("<|im_end|>")


def test_a_failing_sampler_or_a_slow_rollout_gives_a_record_not_a_crash(smollm_tokenizer, docker_image, run_async):
    r = _rollouts(smollm_tokenizer, docker_image, max_turns=3, timeout_s=2.0)

    async def broken(context, params):
        raise RuntimeError("the inference server went away")

    async def stalled(context, params):
        await asyncio.sleep(30)
        return Sampled([], None, "stop")

    rec = run_async(r.run(ROW, broken))
    assert rec.exit_reason == "internal_error" and "went away" in rec.exit_detail
    assert rec.reward == r.reward_config.error_value and "no reward" in rec.reward_detail["why"]
    rec = run_async(r.run(ROW, stalled))
    assert rec.exit_reason == "time_limit" and "longer than 2s" in rec.exit_detail
    assert containers_with_label("insandbox.run_id=task-1") == []


@pytest.mark.parametrize("image", ["insandbox-no-such-image:1"])
def test_a_sandbox_that_cannot_start_is_a_sandbox_error(smollm_tokenizer, docker_image, run_async, image):
    r = _rollouts(smollm_tokenizer, image, max_turns=2)
    gen = ScriptedGenerator(r.chat, [{"turns": [call("submit")]}])
    rec = run_async(r.run(ROW, gen))
    assert rec.exit_reason == "sandbox_error" and "not found" in rec.exit_detail and rec.reward == 0.0


def test_a_reward_function_that_raises_gives_the_error_value(smollm_tokenizer, docker_image, run_async):
    async def broken_reward(row, outcome, config):
        raise ZeroDivisionError("oops")

    r = Rollouts(smollm_tokenizer, RolloutConfig(image=docker_image, max_turns=2), reward_fn=broken_reward)
    rec = run_async(r.run(ROW, ScriptedGenerator(r.chat, [{"turns": [call("submit")]}])))
    assert rec.exit_reason == "submitted" and rec.reward == r.reward_config.error_value
    assert rec.reward_detail["error"] == "ZeroDivisionError: oops"
