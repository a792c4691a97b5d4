"""Rollouts written to a folder from Python (rl/rollout/output.py): rollouts.jsonl record by record,
summary.json with the decode check; and the same files and summary as `insandbox rl rollout` writes."""
from __future__ import annotations

import asyncio
import json

from insandbox.rl.rewards import RewardConfig
from insandbox.rl.rollout import RolloutConfig, RolloutRecord, Rollouts, RolloutWriter, summarize, write_rollouts
from tests.helpers import cli

TOOLS = [{"type": "function", "function": {"name": "submit", "description": "Finish.",
                                           "parameters": {"type": "object", "properties": {}}}}]
ROWS = [{"id": "q1", "problem_statement": "Which letter is right, A or B? The material is in /testbed/documents. "
                                          "Write the letter to /testbed/answer.txt.",
         "ground_truth": "B", "input_files": {"doc_01.txt": "The right letter is B.\n"}, "qa_type": "single-choice",
         "options": ["A", "B"]},
        {"id": "q2", "problem_statement": "Is 7 prime? Write yes or no to /testbed/answer.txt.",
         "ground_truth": "yes", "qa_type": "open"}]
# what differs between two runs of the same rollouts: times, and the ids and times a trajectory records
TIMED = {"wall_s", "rollouts_per_min", "sandbox_share", "generate_share"}


def record(chat, rid: str, reply: str, reward: float) -> RolloutRecord:
    """A rollout of one model turn whose ids are the conversation (as a real one's are)."""
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Task {rid}"}]
    sampled = chat.encode(reply) + chat.stop_token_ids
    return RolloutRecord(id=f"{rid}/g0/s0", task_id=rid, prompt_ids=chat.prompt_ids(messages), response_ids=sampled,
                         response_mask=[1] * len(sampled), reward=reward, exit_reason="submitted", num_turns=1,
                         trajectory={"messages": messages + [{"role": "assistant", "content": chat.assistant_text(
                             sampled)}]})


def test_each_record_is_written_as_it_comes_and_the_summary_checks_them_all(smollm_tokenizer, tmp_path, run_async):
    chat = Rollouts(smollm_tokenizer, RolloutConfig()).chat
    good, other = record(chat, "t1", "The answer is B.", 1.0), record(chat, "t2", "No idea.", 0.0)
    broken = good.model_copy(update={"id": "t3/g0/s0", "task_id": "t3", "response_ids": good.response_ids[:-2]})
    lines_seen = []

    async def rollouts(write):
        for rec in (good, other, broken):
            write(rec)
            lines_seen.append(len((tmp_path / "out" / "rollouts.jsonl").read_text().splitlines()))
            await asyncio.sleep(0)
        return [good, other, broken]

    result = run_async(write_rollouts(tmp_path / "out", chat, rollouts, extra={"where": lambda: {"here": True}}))
    assert lines_seen == [1, 2, 3]  # on disk as soon as each finished
    on_disk = [RolloutRecord.model_validate_json(line)
               for line in (tmp_path / "out" / "rollouts.jsonl").read_text().splitlines()]
    assert on_disk == result.records == [good, other, broken]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert same(summary, result.summary)
    assert summary["rollouts"] == 3 and summary["reward_mean"] == 2 / 3 and summary["where"] == {"here": True}
    check = summary["decode_check"]
    assert check["records"] == 3 and check["mismatches"] == 1 and list(check["problems"]) == ["t3/g0/s0"]
    figures = summarize(result.records, summary["wall_s"])
    assert {k: summary[k] for k in figures if k not in TIMED} == {k: v for k, v in figures.items() if k not in TIMED}


def test_the_writer_can_wrap_any_source_of_records(smollm_tokenizer, tmp_path):
    chat = Rollouts(smollm_tokenizer, RolloutConfig()).chat
    records = [record(chat, f"t{i}", "B", 1.0) for i in range(2)]
    with RolloutWriter(tmp_path / "deep" / "out", chat) as writer:
        for rec in records:
            writer.write(rec)
    summary = writer.finish(records)
    assert summary["decode_check"]["mismatches"] == 0 and summary["wall_s"] >= 0
    assert len((tmp_path / "deep" / "out" / "rollouts.jsonl").read_text().splitlines()) == 2
    assert json.loads((tmp_path / "deep" / "out" / "summary.json").read_text())["rollouts"] == 2


def test_the_python_api_writes_what_the_command_writes(tmp_path, docker_image, run_async):
    """The embedded model, greedy, one turn, one rollout at a time: the command and Rollouts.run_all give
    the same records (ids, masks, rewards, endings) and the same summary, times aside."""
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    settings = {"max_steps": 1, "max_tokens": 48, "max_response_tokens": 512, "temperature": 0.0}
    r = cli("rl", "rollout", "--data", str(data), "--out", str(tmp_path / "cli"), "--repeats", "2",
            "--concurrency", "1", "--image", docker_image, "--seed", "3",
            *[f"--{k.replace('_', '-')}={v}" for k, v in settings.items()],
            timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]

    async def python_api():
        from insandbox.rl.rollout.backends import load_policy

        tokenizer, generate = load_policy(seed=3)
        rollouts = Rollouts(tokenizer, RolloutConfig(image=docker_image, **settings), RewardConfig())
        return await rollouts.run_all(ROWS, generate, tmp_path / "api", n=2, concurrency=1)

    result = run_async(python_api())
    assert sorted(p.name for p in (tmp_path / "cli").iterdir()) == sorted(p.name for p in (tmp_path / "api").iterdir())
    assert sorted(p.name for p in (tmp_path / "api").iterdir()) == ["rollouts.jsonl", "summary.json"]
    by_cli = [json.loads(line) for line in (tmp_path / "cli" / "rollouts.jsonl").read_text().splitlines()]
    by_api = [json.loads(line) for line in (tmp_path / "api" / "rollouts.jsonl").read_text().splitlines()]
    assert by_api == [json.loads(rec.model_dump_json()) for rec in result.records]
    fields = ("id", "task_id", "group", "sample", "prompt_ids", "response_ids", "response_mask", "reward",
              "exit_reason", "masked", "truncated", "num_turns", "tool_calls")
    assert [{k: rec[k] for k in fields} for rec in by_api] == [{k: rec[k] for k in fields} for rec in by_cli]
    assert all(sum(rec["response_mask"]) > 0 and not rec["masked"] for rec in by_api)  # the model sampled, scored
    assert set(by_api[0]) == set(by_cli[0])
    cli_summary = json.loads((tmp_path / "cli" / "summary.json").read_text())
    api_summary = json.loads((tmp_path / "api" / "summary.json").read_text())
    assert same(api_summary, result.summary) and same(cli_summary, json.loads(r.stdout))  # printed as written
    assert same({k: v for k, v in api_summary.items() if k not in TIMED},
                {k: v for k, v in cli_summary.items() if k not in TIMED})
    assert api_summary["rollouts"] == 4 and api_summary["decode_check"]["mismatches"] == 0


def same(a, b) -> bool:
    """Equal as JSON (a NaN, as summaries hold for an empty mean, equals a NaN)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
