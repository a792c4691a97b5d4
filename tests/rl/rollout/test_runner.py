"""Rollouts in real sandboxes with a scripted sampler: ids, masks, logprobs, rewards, records."""
from __future__ import annotations

import asyncio
import os

import pytest

from insandbox.rl.rewards import RewardConfig, RewardResult
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
    r = _rollouts(smollm_tokenizer, docker_image, max_steps=6)
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
    r = _rollouts(smollm_tokenizer, docker_image, max_steps=4)
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
    r = _rollouts(smollm_tokenizer, docker_image, max_steps=10, max_response_tokens=200, max_tokens=40)
    gen = ScriptedGenerator(r.chat, [{"turns": ["word " * 100] * 10}])  # every turn runs out of tokens
    rec = run_async(r.run(ROW, gen))
    assert rec.truncated and rec.exit_reason == "context_length" and "budget of 200" in rec.exit_detail
    assert len(rec.response_ids) <= 200
    assert check_record(rec, r.chat) == []  # the cut turns were closed by environment tokens
    first_env = rec.response_mask.index(0)
    assert r.chat.decode(rec.response_ids[first_env:first_env + 3]).startswith("<|im_end|>")


def test_a_failing_sampler_or_a_slow_rollout_gives_a_record_not_a_crash(smollm_tokenizer, docker_image, run_async):
    r = _rollouts(smollm_tokenizer, docker_image, max_steps=3, time_limit=2.0)

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
    r = _rollouts(smollm_tokenizer, image, max_steps=2)
    gen = ScriptedGenerator(r.chat, [{"turns": [call("submit")]}])
    rec = run_async(r.run(ROW, gen))
    assert rec.exit_reason == "sandbox_error" and "not found" in rec.exit_detail and rec.reward == 0.0


def test_a_reward_function_that_raises_gives_the_error_value(smollm_tokenizer, docker_image, run_async):
    async def broken_reward(row, outcome, config):
        raise ZeroDivisionError("oops")

    r = Rollouts(smollm_tokenizer, RolloutConfig(image=docker_image, max_steps=2), reward_fn=broken_reward)
    rec = run_async(r.run(ROW, ScriptedGenerator(r.chat, [{"turns": [call("submit")]}])))
    assert rec.exit_reason == "submitted" and rec.reward == r.reward_config.error_value
    assert rec.reward_detail["error"] == "ZeroDivisionError: oops"


# ---------------------------------------------------------------------- issue 22: what failures are worth
PENALTIES = RewardConfig(no_answer_penalty=-0.25, max_steps_penalty=-0.25, truncation_penalty=-0.5)  # smoke's


def _scored(tokenizer, image, **config) -> Rollouts:
    """Rollouts scored by the real reward (compute_reward) with the smoke preset's penalties."""
    return Rollouts(tokenizer, RolloutConfig(image=image, **config), PENALTIES)


def test_breaking_the_sandbox_pays_less_than_any_honest_ending(smollm_tokenizer, docker_image, run_async):
    """The model writes the right answer, raises the in-container server's OOM score and hogs memory:
    the kernel kills the container. That is the model's doing (exit_cause "sandbox"): trained on (not
    masked), at the sum of the penalties, below an honest wrong answer and below giving up."""
    many_small = ("for i in $(seq 40); do python3 -c 'import time; a = b\"x\" * (12 << 20); time.sleep(60)' & "
                  "done; wait")
    r = _scored(smollm_tokenizer, docker_image, max_steps=3, memory="256m")
    bomb = ScriptedGenerator(r.chat, [{"turns": [call("execute_bash", command="echo B > /testbed/answer.txt; "
                                                  "echo 1000 > /proc/1/oom_score_adj; " + many_small)]}])
    broken = run_async(r.run(ROW, bomb))
    assert broken.exit_reason == "sandbox_error" and broken.exit_cause == "sandbox", broken.exit_detail
    assert not broken.masked and broken.response_mask.count(1) > 0  # its sampled tokens are trained on
    assert broken.reward == -1.0 and broken.reward_detail["penalties"] == {"broken_sandbox": -1.0}
    assert broken.reward_detail["correct"] == 0.0  # the right answer it wrote first is not read

    wrong = run_async(r.run(ROW, ScriptedGenerator(r.chat, [{"turns": [
        call("execute_bash", command="echo A > /testbed/answer.txt"), call("submit")]}])))
    gave_up = run_async(r.run(ROW, ScriptedGenerator(r.chat, [{"turns": [call("submit")]}])))
    assert (wrong.exit_reason, wrong.reward) == ("submitted", 0.0)
    assert (gave_up.exit_reason, gave_up.reward) == ("submitted", -0.25)
    assert broken.reward < gave_up.reward < wrong.reward
    assert containers_with_label("insandbox.run_id=task-1") == []


@pytest.mark.parametrize("how", ["cpu limit", "file limit"])
def test_every_way_of_breaking_the_sandbox_is_the_models(smollm_tokenizer, docker_image, run_async, how):
    """Beyond memory: PID 1's CPU limit lowered and then loaded (the container exits 137), its open files
    limit lowered (the server dies). No kill came from outside (the engine's events say so): the sandbox's
    doing, trained on at the broken-sandbox penalty, never masked."""
    breaking = {"cpu limit": "prlimit --pid 1 --cpu=1:1; yes 0123456789abcdef | head -c 3000000000",
                "file limit": "prlimit --pid 1 --nofile=3:3; (sleep 0.2 &); sleep 3"}[how]
    r = _scored(smollm_tokenizer, docker_image, max_steps=3)
    rec = run_async(r.run(ROW, ScriptedGenerator(r.chat, [{"turns": [call("execute_bash", command=breaking),
                                                                      call("execute_bash", command="echo here")]}])))
    assert rec.exit_reason == "sandbox_error" and rec.exit_cause == "sandbox", rec.exit_detail
    assert not rec.masked and rec.reward == -1.0, rec.reward_detail
    assert "nothing outside it" in rec.exit_detail


def test_a_kill_from_outside_is_masked_even_after_an_oom_kill(smollm_tokenizer, docker_image, run_async):
    """An honest rollout whose container a child's OOM kill marked (Docker's OOMKilled flag stays set) and
    that someone then kills through the engine: the kill decides (the engine's `kill` event), masked."""
    import subprocess

    r = _scored(smollm_tokenizer, docker_image, max_steps=3, memory="256m")
    kill = ("python3 -c 'b = [bytearray(1 << 20) for _ in range(1024)]'; "  # a child OOM-killed, the server lives
            "sleep 2; echo B > /testbed/answer.txt")

    async def killed_from_outside():
        gen = ScriptedGenerator(r.chat, [{"turns": [call("execute_bash", command=kill),
                                                    call("execute_bash", command="sleep 30")]}])
        task = asyncio.ensure_future(r.run(ROW, gen))
        for _ in range(300):  # until the second command runs
            await asyncio.sleep(0.1)
            if gen.calls >= 2:
                break
        await asyncio.sleep(1.0)
        for cid in containers_with_label("insandbox.run_id=task-1"):
            subprocess.run(["docker", "kill", cid], capture_output=True)
        return await task

    rec = run_async(killed_from_outside())
    assert rec.exit_reason == "sandbox_error" and rec.exit_cause == "infrastructure", rec.exit_detail
    assert rec.masked and "killed through the engine's API" in rec.exit_detail


def test_infrastructure_failures_and_time_limits_are_masked(smollm_tokenizer, docker_image, run_async):
    """A sampler that dies after a turn (the inference server went away) and a rollout past its time
    limit say nothing about the model: masked, with the error value, whatever tokens they sampled."""
    r = _scored(smollm_tokenizer, docker_image, max_steps=4, time_limit=5.0)
    script = ScriptedGenerator(r.chat, [{"turns": [call("execute_bash", command="echo B > /testbed/answer.txt")]}])

    async def dies_after_one_turn(context, params):
        if script.calls:
            raise RuntimeError("the inference server went away")
        return await script(context, params)

    failed = run_async(r.run(ROW, dies_after_one_turn))
    assert failed.exit_reason == "internal_error" and failed.exit_cause == "infrastructure"
    assert failed.masked and failed.reward == 0.0 and failed.reward_detail["masked"] is True
    assert 1 in failed.response_mask  # one turn was sampled: masked all the same

    script.calls = 0

    async def stalls_after_one_turn(context, params):
        if script.calls:
            await asyncio.sleep(60)
        return await script(context, params)

    slow = run_async(r.run(ROW, stalls_after_one_turn))
    assert slow.exit_reason == "time_limit" and slow.masked and slow.reward == 0.0
    done = run_async(r.run(ROW, ScriptedGenerator(r.chat, [{"turns": [call("submit")]}])))
    assert not done.masked and done.exit_cause is None
    assert containers_with_label("insandbox.run_id=task-1") == []


def test_a_last_turn_cut_by_the_budget_is_truncated(smollm_tokenizer, docker_image, run_async):
    """Regression (issue 22): the last allowed turn, cut by the response budget, ended as max_steps
    with truncated false (the step ended the episode before the budget was looked at): the max-steps
    penalty instead of the truncation one, and grpo.mask_truncated missed it."""
    from insandbox.rl.trainers.rollout_hook import SandboxRollouts

    r = _scored(smollm_tokenizer, docker_image, max_steps=2, max_response_tokens=600, max_tokens=8192)
    gen = ScriptedGenerator(r.chat, [{"turns": [call("execute_bash", command="echo B > /testbed/answer.txt"),
                                                "word " * 2000]}])  # the last turn runs past the budget
    rec = run_async(r.run(ROW, gen))
    assert rec.truncated and rec.exit_reason == "context_length" and "budget of 600" in rec.exit_detail
    assert len(rec.response_ids) == 600 and rec.response_ids[-1] not in r.chat.stop_token_ids
    assert rec.reward == 1.0 - 0.5 and rec.reward_detail["penalties"] == {"truncation": -0.5}  # the answer counts
    assert check_record(rec, r.chat) == []
    assert rec.trajectory["steps"][-1]["tool_calls"] == [] and rec.num_turns == 2
    hook = SandboxRollouts(rollouts=None, rows={}, out=None, concurrency=1, mask_truncated=True)
    assert hook._for_trl([rec], pad_id=0)["env_mask"] == [[0] * 600]
