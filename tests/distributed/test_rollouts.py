"""RL rollouts over a local multi-node Ray cluster: sandboxes on every node, one policy actor."""
from __future__ import annotations

import json
from functools import partial

from insandbox.distributed.cluster import connect, disconnect
from insandbox.distributed.rollouts import RayRollouts
from insandbox.rl.rewards import RewardConfig
from insandbox.rl.rollout import RolloutConfig, Rollouts, check_record
from insandbox.rl.rollout.backends.scripted import load_scripted_policy
from tests.helpers import cli

ROWS = [{"id": f"t{i}", "problem_statement": f"Task {i}: which is right, A or B?", "ground_truth": "B",
         "qa_type": "single-choice", "options": ["A", "B"]} for i in range(2)]


def call(name: str, **args) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'


def test_rollouts_run_in_the_sandboxes_of_every_node_sampled_by_one_policy(ray_cluster, docker_image, run_async):
    turns = [call("execute_bash", command="echo B > /testbed/answer.txt"), call("submit")]
    config = RolloutConfig(image=docker_image, max_turns=4, max_response_tokens=1024)
    connected = connect(ray_cluster.address)
    try:
        async def go():
            remote = RayRollouts(partial(load_scripted_policy, [{"turns": turns}], 0.2, config=config), config,
                                 RewardConfig(), concurrency=4)
            seen = []
            try:
                records = await remote.run_groups(ROWS, n=2, on_record=seen.append)
            finally:
                await remote.close()
            return remote, records, seen

        remote, records, seen = run_async(go())
    finally:
        if connected:
            disconnect()
    assert [(r.task_id, r.sample) for r in records] == [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)]
    assert len(seen) == 4  # each was handed on as it came back
    chat = Rollouts(remote.tokenizer, config).chat
    for r in records:
        assert r.exit_reason == "submitted" and r.reward == 1.0 and r.tool_calls == 2
        assert r.trajectory["steps"] and not check_record(r, chat)  # token for token what the sandbox saw
    summary = remote.summary()
    assert len(summary["rollouts_per_node"]) == 2 and sum(summary["rollouts_per_node"].values()) == 4
    assert summary["rollouts_run_again"] == 0


def test_rl_rollout_ray_with_the_embedded_model(ray_cluster, tmp_path, docker_image):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "out"
    r = cli("rl", "rollout", "--data", str(data), "--out", str(out), "--repeats", "1", "--concurrency", "2",
            "--max-steps", "1", "--max-tokens", "16", "--max-response-tokens", "256", "--image", docker_image,
            "--ray", ray_cluster.address, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    records = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    assert len(records) == 2 and summary["decode_check"]["mismatches"] == 0
    assert all(rec["num_turns"] == 1 and rec["response_logprobs"] for rec in records)
    assert sum(summary["ray"]["rollouts_per_node"].values()) == 2
    r = cli("rl", "rollout", "--data", str(data), "--out", str(out), "--ray", "127.0.0.1:1")
    assert r.returncode == 2 and "no Ray cluster answers there" in r.stderr
