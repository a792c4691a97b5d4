"""compute_reward end to end (worker processes included): values, penalties, the detail, and that
it neither hangs nor raises, alone or by the hundred in one event loop."""
from __future__ import annotations

import asyncio
import time

import pytest

import insandbox.rl.rewards as rewards
from insandbox.rl.rewards import (
    Outcome,
    RewardConfig,
    RewardResult,
    compute_reward,
    compute_reward_sync,
    stop_reward_workers,
)
from insandbox.rl.schema import TaskRow

HANG_BOUND_S = 60  # far above the timeouts used here: only proves that a call did not hang


def task(**fields) -> dict:
    base = {"id": "t1", "problem_statement": "Read /testbed/documents; write the answer to /testbed/answer.txt.",
            "ground_truth": "Paris", "input_files": {"doc_1.txt": "Paris is the capital of France."}}
    return TaskRow(**{**base, **fields}).as_record()


SINGLE = task(qa_type="single-choice", ground_truth="C", options=["A", "B", "C", "D"])
MULTI = task(qa_type="multi-choice", ground_truth="A,C", options=["A", "B", "C", "D", "E"])
OPEN = task(aliases=["City of Paris"])
NUMBER = task(ground_truth="42", answer_type="number")
PENALTIES = RewardConfig(no_answer_penalty=-1.0, max_steps_penalty=-0.5, truncation_penalty=-0.25)


def reward(row, answer, exit_reason="submitted", config=None, truncated=False) -> RewardResult:
    return asyncio.run(compute_reward(row, Outcome(answer, exit_reason, truncated), config))


@pytest.mark.parametrize("row, right, wrong", [
    (SINGLE, "Answer: C", "B"), (MULTI, "C and A", "A"), (OPEN, "the City of Paris.", "Lyon"),
    (NUMBER, "\\boxed{42}", "41 or 42"),
])
def test_each_qa_type_right_and_wrong(row, right, wrong):
    good, bad = reward(row, right), reward(row, wrong)
    assert (good.value, good.correct, good.error) == (1.0, 1.0, None), good.detail
    assert (bad.value, bad.correct, bad.error) == (0.0, 0.0, None), bad.detail
    assert good.detail["qa_type"] == row["qa_type"] and good.detail["penalties"] == {}
    assert "scoring_s" in good.detail and "method" in good.detail


def test_f1_options_reach_the_scorers():
    config = RewardConfig(multi_choice="f1", open="f1")
    assert reward(MULTI, "A", config=config).value == pytest.approx(2 / 3)
    assert reward(OPEN, "Paris France", config=config).value == pytest.approx(2 / 3)  # "Paris, France": two answers, 0


def test_a_task_row_object_is_accepted():
    assert reward(TaskRow(**SINGLE), "C").value == 1.0


def test_no_answer_file_scores_zero_without_scoring_and_takes_its_penalty():
    result = reward(OPEN, None, config=PENALTIES)
    assert (result.value, result.correct, result.error) == (-1.0, 0.0, None)
    assert result.detail["why"] == "no answer file" and "scoring_s" not in result.detail
    assert reward(OPEN, "  \n", config=PENALTIES).detail["why"] == "empty answer file"


def test_penalties_add_to_the_correctness():
    assert reward(OPEN, "Paris", "max_steps", PENALTIES).value == 0.5
    assert reward(OPEN, "Paris", "stuck", PENALTIES).value == 0.5
    assert reward(OPEN, "Paris", "submitted", PENALTIES, truncated=True).value == 0.75
    assert reward(OPEN, "Lyon", "token_budget", PENALTIES).value == -0.25
    everything = reward(OPEN, None, "max_steps", PENALTIES, truncated=True)
    assert everything.value == -1.75
    assert everything.detail["penalties"] == {"no_answer": -1.0, "max_steps": -0.5, "truncation": -0.25}


def test_an_infrastructure_failure_is_flagged_not_penalised():
    result = reward(OPEN, "Paris", "sandbox_error", PENALTIES)
    assert result.value == 1.0 and result.detail["exit_failure"] is True


def test_an_answer_over_the_cap_scores_zero_unread():
    result = reward(NUMBER, "\\boxed{" * 150_000)  # 1 MB of unclosed boxes
    assert (result.value, result.error) == (0.0, None)
    assert result.detail["why"] == "answer longer than 10000 characters: not read"
    assert result.detail["answer_chars"] == 1_050_000


@pytest.mark.parametrize("answer, cap", [
    ("\\left(9^{9^{9}}\\right)", 10_000),  # math-verify computes 9^(9^9) holding the GIL
    ("\\boxed{" * 150_000, 2_000_000),  # 1 MB of unclosed boxes: quadratic to search (the cap raised to let it in)
])
def test_a_pathological_answer_times_out_with_the_error_value(answer, cap):
    config = RewardConfig(timeout_s=2, error_value=-0.1, max_answer_chars=cap, max_steps_penalty=-0.5)
    started = time.monotonic()
    result = reward(NUMBER, answer, "max_steps", config)
    assert time.monotonic() - started < HANG_BOUND_S
    assert result.error == "timeout: scoring took longer than 2 s; worker killed"
    assert (result.value, result.correct) == (pytest.approx(-0.6), 0.0)  # error_value, and the penalty still adds
    assert result.detail["error"] == result.error and result.detail["error_value"] == -0.1
    assert reward(NUMBER, "42").value == 1.0  # and the next reward is scored as usual


@pytest.mark.parametrize("row, message", [
    (task(qa_type="single-choice", ground_truth="E", options=["A", "B", "C"]), "ValueError: ground truth E"),
    (task(qa_type="multi-choice", ground_truth="A,C") | {"options": 5}, "ValueError: options must be a list"),
    ({"qa_type": "open", "ground_truth": "x", "aliases": [{"bad": 1}]}, "ValueError: an alias must be text"),
    ({"qa_type": "essay", "ground_truth": "x"}, "ValueError: unknown qa_type 'essay'"),
    (["not", "a", "row"], "TypeError: a row is a dict"),
])
def test_an_exception_while_scoring_is_an_error_result_not_an_exception(row, message):
    result = reward(row, "A", config=RewardConfig(error_value=-0.3))
    assert result.error.startswith(message), result.error
    assert result.value == -0.3


def test_an_answer_that_is_not_text_is_an_error_result():
    result = reward(OPEN, b"Paris")
    assert result.error == "TypeError: an answer is text, got bytes" and result.value == 0.0


def test_many_concurrent_rewards_in_one_event_loop():
    cases = [(SINGLE, "C", 1.0), (SINGLE, "D", 0.0), (MULTI, "A, C", 1.0), (OPEN, "Paris", 1.0),
             (NUMBER, "42.0", 1.0), (NUMBER, "41", 0.0), (OPEN, None, 0.0)] * 30

    async def body():
        return await asyncio.gather(*(compute_reward(row, Outcome(answer, "submitted")) for row, answer, _ in cases))

    results = asyncio.run(body())
    assert [r.value for r in results] == [expected for _, _, expected in cases]
    assert all(r.error is None for r in results)


def test_a_pathological_answer_among_many_does_not_spoil_the_others():
    config = RewardConfig(timeout_s=2)

    async def body():
        bad = compute_reward(NUMBER, Outcome("\\left(9^{9^{9}}\\right)", "submitted"), config)
        good = [compute_reward(OPEN, Outcome("Paris", "submitted"), config) for _ in range(50)]
        return await asyncio.gather(bad, *good)

    bad, *good = asyncio.run(body())
    assert bad.error.startswith("timeout")
    assert [r.value for r in good] == [1.0] * 50


def test_the_sync_wrapper_gives_the_same_results():
    for row, answer in [(SINGLE, "C"), (MULTI, "A"), (OPEN, "Lyon"), (NUMBER, "42"), (OPEN, None)]:
        sync = compute_reward_sync(row, Outcome(answer, "max_steps"), PENALTIES)
        via_async = reward(row, answer, "max_steps", PENALTIES)
        sync.detail.pop("scoring_s", None), via_async.detail.pop("scoring_s", None)
        assert sync == via_async


def test_documents_never_travel_to_a_worker():
    fields = rewards._plan(OPEN, Outcome("Paris", "submitted"), RewardConfig()).job[0]
    assert set(fields) == {"qa_type", "ground_truth", "options", "aliases", "answer_type", "problem_statement"}
    assert fields["problem_statement"] == ""  # only a choice row without options reads the question


def test_workers_restart_after_a_stop_and_after_a_fork(monkeypatch):
    stop_reward_workers()
    assert reward(OPEN, "Paris").value == 1.0
    parents = rewards.worker_pool()
    monkeypatch.setattr(parents, "pid", -1)  # as a forked child sees its parent's pool
    assert rewards.worker_pool() is not parents
    parents.close()
    assert reward(OPEN, "Paris").value == 1.0
