"""The insandbox agent loop driven by verl's own agent-loop machinery on a CPU.

Real parts throughout: verl's config (the recipe's, scaled down), its RLHFDataset over our parquet,
its AgentLoopWorker and AgentLoopManager (Ray actors), its LLMServerClient and load balancer, its
post-processing into a DataProto and its RLOO advantages. The one verl protocol implemented here is
the rollout server, and it is a real sampler: llama.cpp running the embedded SmolLM2 as a Ray actor
(insandbox.rl.trainers.verl_cpu_server). Every rollout runs in its own Docker sandbox.
"""
from __future__ import annotations

import asyncio
import glob
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from insandbox.models.local_server import default_gguf
from insandbox.rl.rewards import RewardResult
from insandbox.rl.rollout import RolloutConfig, RolloutRecord, Rollouts, check_record
from insandbox.rl.trainers.verl_agent_loop import InSandboxAgentLoop
from insandbox.rl.trainers.verl_cpu_server import export_gguf_as_hf, start_cpu_llm_client
from insandbox.rl.trainers.verl_data import AGENT_NAME, TASK_COLUMN, verl_rows, write_parquet

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "recipes" / "verl"
N = 2  # rollouts per task (rollout.n)
TASKS = [
    {"id": "sky", "problem_statement": "What colour is the sky in the story? The material is in /testbed/documents. "
                                       "Write the answer to /testbed/answer.txt, then submit.", "ground_truth": "blue",
     "input_files": {"story.txt": "The sky over the village was blue."}},
    {"id": "city", "problem_statement": "Which city did they visit? The material is in /testbed/documents. Write the "
                                        "answer to /testbed/answer.txt, then submit.", "ground_truth": "Paris",
     "input_files": {"trip.txt": "Last spring we visited Paris."}},
]


async def answer_reward(row, outcome, config):
    """The tests' outcome reward (insandbox.rl.rewards arrives separately): the answer file, exactly."""
    correct = float((outcome.answer or "").strip().lower() == str(row["ground_truth"]).lower())
    return RewardResult(value=correct, correct=correct, detail={"answer": outcome.answer})


def cpu_policy_and_rows(tmp_path_factory, name: str) -> tuple[Path, Path]:
    """The embedded model as a transformers folder (made once a session) and a folder holding the tasks
    as verl's train.parquet."""
    model = tmp_path_factory.getbasetemp() / "smollm2-hf"
    if not (model / "config.json").is_file():
        export_gguf_as_hf(default_gguf(), model)
    work = tmp_path_factory.mktemp(name)
    write_parquet(verl_rows(TASKS), work / "train.parquet")
    return model, work


@pytest.fixture(scope="module")
def setup(tmp_path_factory, docker_image):
    """The recipe's trainer config at CPU scale, a Ray cluster, and verl's LLMServerClient over llama.cpp."""
    import ray
    from hydra import compose, initialize_config_dir

    model, work = cpu_policy_and_rows(tmp_path_factory, "verl-loop")
    records = work / "records"
    (work / "agent_loop.yaml").write_text(json.dumps([{
        "name": AGENT_NAME, "_target_": "insandbox.rl.trainers.verl_agent_loop.InSandboxAgentLoop",
        "rollout": {"max_turns": 2, "max_tokens_per_turn": 24, "timeout_s": 600, "image": docker_image},
        "reward_fn": "tests.rl.trainers.test_verl_agent_loop:answer_reward",
        "max_concurrent_rollouts": 4, "records_dir": str(records)}]), encoding="utf-8")
    with initialize_config_dir(config_dir=str(RECIPE), version_base=None):
        config = compose("rloo_qwen3_4b", overrides=[
            f"actor_rollout_ref.model.path={model}", f"data.train_files={work / 'train.parquet'}",
            f"data.val_files={work / 'train.parquet'}", "data.max_prompt_length=2048", "data.max_response_length=512",
            f"data.train_batch_size={len(TASKS)}", f"actor_rollout_ref.rollout.n={N}",
            "actor_rollout_ref.rollout.agent.num_workers=2",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={work / 'agent_loop.yaml'}",
            f"+data.cache_dir={work / 'cache'}", "data.filter_overlong_prompts_workers=1"])
    # Ray's workers import insandbox and this module (the reward) as the test process does
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=4, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        client, servers = start_cpu_llm_client(config, default_gguf())
        yield {"config": config, "client": client, "servers": servers, "records": records}
    finally:
        ray.shutdown()


def training_batch(config, tokenizer, n: int):
    """A step's generation batch, as verl's trainer makes it: dataset rows, a uid per task, n copies each."""
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    dataset = RLHFDataset(config.data.train_files, tokenizer, config.data)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    batch.non_tensor_batch["uid"] = np.array([f"uid-{i}" for i in range(len(batch))], dtype=object)
    batch.meta_info["global_steps"] = 1
    return batch.repeat(repeat_times=n, interleave=True)


def read_records(folder: Path) -> dict[str, dict]:
    out = {}
    for path in glob.glob(str(folder / "*.jsonl")):
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            out[row["request_id"]] = {**row, "file": Path(path).name}
    return out


def test_worker_rollouts_become_verls_training_batch(setup):
    """verl's AgentLoopWorker runs the loop for a batch (2 tasks x n=2) and post-processes it into the
    DataProto the trainer consumes; every row is its rollout record, token for token."""
    from verl.experimental.agent_loop import AgentLoopWorker
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.ray_trainer import compute_advantage

    config = setup["config"]
    worker = AgentLoopWorker(config, setup["client"])
    batch = training_batch(config, worker.tokenizer, N)
    assert list(batch.non_tensor_batch["agent_name"]) == [AGENT_NAME] * len(TASKS) * N
    out = asyncio.run(worker.generate_sequences(batch))

    rows, P, R = len(TASKS) * N, config.actor_rollout_ref.rollout.prompt_length, config.data.max_response_length
    shapes = {k: tuple(v.shape) for k, v in out.batch.items()}
    assert shapes == {"prompts": (rows, P), "responses": (rows, R), "response_mask": (rows, R),
                      "input_ids": (rows, P + R), "attention_mask": (rows, P + R), "position_ids": (rows, P + R),
                      "rollout_log_probs": (rows, R), "rm_scores": (rows, R)}
    records = read_records(setup["records"])
    chat = Rollouts(worker.tokenizer, RolloutConfig(), reward_fn=answer_reward).chat  # the loop's chat format
    seen = []
    for i in range(rows):
        info = out.non_tensor_batch["insandbox"][i]
        record = RolloutRecord(**records[info["request_id"]])
        assert record.id == info["record_id"]
        seen.append((record.task_id, record.sample))
        assert record.task_id == TASKS[i // N]["id"] and record.group == i // N
        attention = out.batch["attention_mask"][i]
        prompt = out.batch["prompts"][i][attention[:P].bool()].tolist()
        valid = int(attention[P:].sum())
        response = out.batch["responses"][i][:valid].tolist()
        mask = out.batch["response_mask"][i]
        assert prompt == record.prompt_ids and response == record.response_ids
        assert mask[:valid].tolist() == record.response_mask and int(mask[valid:].sum()) == 0
        assert valid <= R and len(prompt) <= P
        # the model's own tokens are trained on; the sandbox's answers (and template glue) are not
        assert 0 < int(mask.sum()) < valid, "a two-turn episode has environment tokens between the turns"
        assert check_record(record, chat) == []  # the ids decode to the conversation the sandbox saw
        env_text = chat.decode([t for t, m in zip(record.response_ids, record.response_mask) if not m])
        messages = record.trajectory["messages"]
        last_turn = max(j for j, m in enumerate(messages) if m["role"] == "assistant")
        answers = [m["content"] for m in messages[2:last_turn] if m["role"] != "assistant"]
        assert answers and all(a in env_text for a in answers)  # the masked tokens are the sandbox's answers
        assert record.trajectory["sandbox"]["container_id"]  # a real sandbox ran it
        # logprobs: the sampler's at model tokens, 0 at environment tokens and padding
        logprobs = out.batch["rollout_log_probs"][i]
        expected = [lp if m else 0.0 for lp, m in zip(record.response_logprobs, record.response_mask)]
        assert torch.allclose(logprobs[:valid], torch.tensor(expected, dtype=logprobs.dtype))
        assert all(lp <= 0 for lp, m in zip(record.response_logprobs, record.response_mask) if m)
        # the outcome reward sits on the last response token, nowhere else
        scores = out.batch["rm_scores"][i]
        assert float(scores[valid - 1]) == record.reward == answer_reward_value(record)
        assert int((scores != 0).sum()) <= 1
        assert out.non_tensor_batch["__num_turns__"][i] == 2 * record.num_turns
        assert info["exit_reason"] == record.exit_reason and record.num_turns >= 1
    assert sorted(seen) == sorted((t["id"], s) for t in TASKS for s in range(N))
    # reward_extra_info: numbers verl can average, one array per key
    keys = ["correct", "answered", "truncated", "failed", "masked", "broken_sandbox", "model_turns", "tool_calls"]
    for key in keys:
        assert out.non_tensor_batch[key].shape == (rows,)
        assert all(isinstance(float(v), float) for v in out.non_tensor_batch[key])
    assert sorted(out.meta_info["reward_extra_keys"]) == sorted(keys)

    # the trainer's next step: RLOO advantages over each task's group, by verl
    assert list(out.non_tensor_batch["uid"]) == list(batch.non_tensor_batch["uid"])  # groups kept, in order
    out.batch["token_level_rewards"] = out.batch["rm_scores"]
    advantaged = compute_advantage(out, adv_estimator="rloo", num_repeat=N, config=AlgoConfig(adv_estimator="rloo"))
    rewards = out.batch["rm_scores"].sum(-1).view(len(TASKS), N)
    baseline = (rewards.sum(-1, keepdim=True) - rewards) / (N - 1)  # the mean of the group's other rollouts
    expected = (rewards - baseline).view(-1, 1) * out.batch["response_mask"]
    assert torch.allclose(advantaged.batch["advantages"], expected.to(advantaged.batch["advantages"].dtype))


def answer_reward_value(record: RolloutRecord) -> float:
    task = next(t for t in TASKS if t["id"] == record.task_id)
    answer = record.trajectory.get("answer")
    return float((answer or "").strip().lower() == task["ground_truth"].lower())


def test_manager_runs_the_loop_in_rays_agent_loop_workers(setup):
    """verl's AgentLoopManager: Ray actor workers that load the loop from the agent-loop YAML
    (agent_loop_config_path, as on a cluster), the batch split between them, one DataProto back."""
    import ray
    from verl.experimental.agent_loop import AgentLoopManager
    from verl.utils.tokenizer import hf_tokenizer

    config = setup["config"]
    before = set(read_records(setup["records"]))
    manager = AgentLoopManager.create(config, setup["client"])
    assert len(manager.agent_loop_workers) == 2
    batch = training_batch(config, hf_tokenizer(config.actor_rollout_ref.model.path), N).slice(0, N)  # one task
    out = manager.generate_sequences(batch)
    assert out.batch["responses"].shape == (N, config.data.max_response_length)
    assert out.batch["rm_scores"].shape == out.batch["responses"].shape
    assert "agent_loop/generate_sequences/mean" in out.meta_info["timing"]  # verl's timing, from our metrics
    new = {k: v for k, v in read_records(setup["records"]).items() if k not in before}
    assert sorted(v["task_id"] for v in new.values()) == [TASKS[0]["id"]] * N
    assert len({v["file"] for v in new.values()}) == 2  # each worker process ran one rollout
    assert sorted(v["sample"] for v in new.values()) == list(range(N))  # numbered by verl's priority
    for i, info in enumerate(out.non_tensor_batch["insandbox"]):
        record = RolloutRecord(**new[info["request_id"]])
        valid = int(out.batch["attention_mask"][i][config.actor_rollout_ref.rollout.prompt_length:].sum())
        assert out.batch["responses"][i][:valid].tolist() == record.response_ids
    requests = sum(ray.get(server.stats.remote())["requests"] for server in setup["servers"])
    assert requests >= sum(v["num_turns"] for v in new.values())  # every turn went through the llama.cpp actor


def test_loop_refuses_a_prompt_over_verls_prompt_length(setup):
    """A prompt longer than rollout.prompt_length is a data error (cutting it would cut the system
    prompt): the loop says so before a sandbox starts."""
    loop = build_loop(setup)
    long_task = {**TASKS[0], "id": "long", "problem_statement": "word " * 3000}
    with pytest.raises(ValueError, match="rollout.prompt_length=2048"):
        asyncio.run(loop.run({"temperature": 1.0}, **{TASK_COLUMN: json.dumps(long_task), "index": 0}))


def test_loop_output_as_verls_v1_trainer_takes_it(setup):
    """One rollout without logprobs (calculate_log_probs off), straight from the loop, through what
    verl's V1 trainer does with an output (as_dict, then the TensorDict it stores); and a rollout that
    sampled nothing still gives well-formed tensors (one masked token)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    loop = build_loop(setup)
    row = {TASK_COLUMN: json.dumps(TASKS[1]), "index": 1, "session_id": 3, "uid": "uid-v1", "global_steps": 7}
    output = asyncio.run(loop.run({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": False}, **row))
    assert isinstance(output, AgentLoopOutput) and output.response_logprobs is None
    assert output.extra_fields["insandbox"]["record_id"] == "city/g1/s3"
    assert len(output.response_ids) == len(output.response_mask) <= setup["config"].data.max_response_length
    field = output.as_dict()
    assert "rollout_log_probs" not in field
    assert field["rm_scores"][-1] == output.reward_score and int((field["rm_scores"] != 0).sum()) <= 1
    stored = list_of_dict_to_tensordict([{**field, **row}])
    assert stored["responses"][0].tolist() == output.response_ids

    empty = RolloutRecord(id="city/g1/s4", task_id="city", prompt_ids=output.prompt_ids, response_ids=[],
                          response_mask=[], response_logprobs=None, exit_reason="model_error")
    from insandbox.rl.trainers.verl_sampler import ServerManagerSampler

    blank = loop._output(empty, ServerManagerSampler(setup["client"], {}, "rid"), "rid")
    assert blank.response_ids == [loop.rollouts.chat.stop_token_ids[0]] and blank.response_mask == [0]
    assert blank.extra_fields["reward_extra_info"]["failed"] == 1.0
    assert blank.as_dict()["responses"].shape == (1,)
    # when verl asked for logprobs it stacks every row's: one that sampled nothing (a rollout that timed out
    # before its first token, among others that did) still has them, else the batch failed to assemble
    asked = loop._output(empty, ServerManagerSampler(setup["client"], {"logprobs": True}, "rid"), "rid")
    assert asked.response_logprobs == [0.0] and asked.response_mask == [0]


def build_loop(setup) -> InSandboxAgentLoop:
    """The loop as verl's worker builds it: hydra.utils.instantiate over the agent-loop YAML entry."""
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.tokenizer import hf_tokenizer

    config = setup["config"]
    entry = OmegaConf.load(config.actor_rollout_ref.rollout.agent.agent_loop_config_path)[0]
    loop = hydra.utils.instantiate(
        entry, trainer_config=DictConfigWrap(config), server_manager=setup["client"],
        tokenizer=hf_tokenizer(config.actor_rollout_ref.model.path), processor=None, dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data))
    assert isinstance(loop, InSandboxAgentLoop)
    return loop


def test_masked_rollouts_leave_verls_loss_and_baselines(setup, monkeypatch):
    """Issue 22 on the verl path: a rollout whose sandbox engine fails after a turn and one past its
    time limit come out of verl's own worker with a response_mask of zeros (the actor's loss never
    sees them) and `masked` in reward_extra_info; the recipe's estimator (insandbox_rloo) gives them
    advantage 0 and leaves them out of their group's baseline. (Faults: tests/rl/trainers/faults.py.)"""
    from verl.experimental.agent_loop import AgentLoopWorker
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from tests.rl.trainers.faults import inject

    # each task's first rollout: the engine fails after the first turn; the city's second: no step back
    inject(monkeypatch, lambda row, sample: "engine" if sample == 0 else "slow" if (row["id"], sample) == ("city", 1)
           else None, timeout_s=20.0)
    config, n = setup["config"], 3
    worker = AgentLoopWorker(config, setup["client"])
    batch = training_batch(config, worker.tokenizer, n)
    # uids of their own: the loop numbers a group's rollouts per uid, in the order verl starts them
    batch.non_tensor_batch["uid"] = np.array([f"masking-{i // n}" for i in range(len(batch))], dtype=object)
    out = asyncio.run(worker.generate_sequences(batch))

    masked = [bool(v) for v in out.non_tensor_batch["masked"]]
    reasons = [info["exit_reason"] for info in out.non_tensor_batch["insandbox"]]
    assert masked == [True, False, False, True, True, False], reasons
    assert reasons[0] == reasons[3] == "sandbox_error" and reasons[4] == "time_limit"
    for i, is_masked in enumerate(masked):
        mask = out.batch["response_mask"][i]
        assert (int(mask.sum()) == 0) == is_masked
    records = read_records(setup["records"])
    failed = RolloutRecord(**records[out.non_tensor_batch["insandbox"][0]["request_id"]])
    assert failed.masked and sum(failed.response_mask) > 0  # it did sample a turn: masked all the same

    out.batch["token_level_rewards"] = out.batch["rm_scores"]
    out.batch["rm_scores"][1, 0] += 1.0  # a spread in each group (the tiny model's answers all score alike)
    out.batch["rm_scores"][5, 0] += 0.5
    advantaged = compute_advantage(out, adv_estimator="insandbox_rloo", num_repeat=n,
                                   config=AlgoConfig(adv_estimator="insandbox_rloo"))
    advantages = advantaged.batch["advantages"]
    scores = out.batch["rm_scores"].sum(-1)
    uids = list(out.non_tensor_batch["uid"])
    for i in range(len(masked)):
        if masked[i]:
            assert float(advantages[i].abs().sum()) == 0.0
            continue
        others = [float(scores[j]) for j in range(len(masked)) if uids[j] == uids[i] and j != i and not masked[j]]
        expected = float(scores[i]) - sum(others) / len(others) if others else 0.0
        valid = out.batch["response_mask"][i].bool()
        assert torch.allclose(advantages[i][valid], torch.full_like(advantages[i][valid], expected))
    assert float(advantages[1].abs().sum()) > 0  # the spread reached the kept rollouts
