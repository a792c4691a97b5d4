"""The fully async agent loop (verl_async.py) on a CPU: verl's FullyAsyncLLMServerClient (the client
its fully async rollouter gives agent loops, which resumes a turn a weight sync cut: partial_rollout)
over the llama.cpp rollout server, a weight sync made in the middle of a turn, every rollout in a
Docker sandbox. Then verl's own fully async path: its sample feed, its FullyAsyncAgentLoopManager
(Ray workers loading the loop from the agent-loop YAML), its batch assembly for the trainer, and
the trainer's metrics."""
from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import numpy as np
import pytest

from insandbox.models.local_server import default_gguf
from insandbox.rl.rollout import RolloutRecord
from insandbox.rl.trainers import verl_async
from insandbox.rl.trainers.verl_async import InSandboxAsyncAgentLoop
from insandbox.rl.trainers.verl_cpu_server import start_cpu_llm_client
from insandbox.rl.trainers.verl_data import AGENT_NAME, TASK_COLUMN
from tests.rl.trainers.test_verl_agent_loop import TASKS, cpu_policy_and_rows, read_records
from tests.rl.trainers.test_verl_async_recipe import compose

ROOT = Path(__file__).resolve().parents[3]
N = 2


@pytest.fixture(scope="module")
def setup(tmp_path_factory, docker_image):
    import ray
    from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient

    model, work = cpu_policy_and_rows(tmp_path_factory, "verl-async-loop")
    records = work / "records"
    (work / "agent_loop_async.yaml").write_text(json.dumps([{
        "name": AGENT_NAME, "_target_": "insandbox.rl.trainers.verl_async.InSandboxAsyncAgentLoop",
        "rollout": {"max_steps": 2, "max_tokens": 24, "time_limit": 600, "image": docker_image},
        "reward_fn": "tests.rl.trainers.test_verl_agent_loop:answer_reward",
        "max_concurrent_rollouts": 4, "records_dir": str(records), "max_staleness": 1}]), encoding="utf-8")
    config = compose([
        f"actor_rollout_ref.model.path={model}", f"data.train_files={work / 'train.parquet'}",
        f"data.val_files={work / 'train.parquet'}", "data.max_prompt_length=2048", "data.max_response_length=512",
        f"actor_rollout_ref.rollout.n={N}", "actor_rollout_ref.rollout.agent.num_workers=1",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={work / 'agent_loop_async.yaml'}",
        f"+data.cache_dir={work / 'cache'}", "data.filter_overlong_prompts_workers=1"])
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=4, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        client, servers = start_cpu_llm_client(config, default_gguf(), client_cls=FullyAsyncLLMServerClient)
        yield {"config": config, "client": client, "server": servers[0], "records": records, "model": model}
    finally:
        ray.shutdown()


def build_loop(setup, **overrides) -> InSandboxAsyncAgentLoop:
    """The loop as verl's agent-loop worker builds it (hydra.utils.instantiate over the YAML entry)."""
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
        data_config=DictConfigWrap(config.data), **overrides)
    assert isinstance(loop, InSandboxAsyncAgentLoop)
    return loop


@pytest.mark.parametrize("bound, dropped", [(1, True), (2, False)])
def test_a_turn_resumed_after_a_weight_sync_carries_the_older_version(setup, monkeypatch, bound, dropped):
    """Weights at version 3; a sync to 5 cuts the rollout's first turn after 4 tokens and verl's client
    resumes it on the new weights. The turn's version is 3 (the oldest that sampled it), later turns 5;
    the record's is 3, two versions behind the newest seen: past a bound of 1 it is dropped (masked,
    counted), within 2 it is trained on."""
    import ray

    monkeypatch.setattr(verl_async, "CLOCK", verl_async.VersionClock())
    server = setup["server"]
    ray.get(server.set_global_steps.remote(3))
    before = ray.get(server.stats.remote())["requests"]
    ray.get(server.sync_during.remote(0, 4, 5))
    loop = build_loop(setup, max_staleness=bound)
    row = {TASK_COLUMN: json.dumps(TASKS[0]), "index": 0, "uid": f"resume-{bound}", "session_id": bound}
    output = asyncio.run(loop.run({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}, **row))

    extra = output.extra_fields
    versions = extra["policy_versions"]
    assert versions[0] == 3 and all(v == 5 for v in versions[1:]) and extra["policy_version"] == 3
    assert (extra["min_global_steps"], extra["max_global_steps"]) == (3, 5)  # verl's partial-rollout span
    assert extra["staleness"] == 2 and extra["current_version"] == 5 == verl_async.CLOCK.latest
    turns = len(versions)
    assert ray.get(server.stats.remote())["requests"] - before == turns + 1  # the cut turn took two requests
    info = extra["reward_extra_info"]
    assert info["stale_dropped"] == float(dropped)
    assert (sum(output.response_mask) == 0) == dropped and info["masked"] == float(dropped)
    record_row = read_records(setup["records"])[extra["insandbox"]["request_id"]]
    record = RolloutRecord(**{k: v for k, v in record_row.items() if k in RolloutRecord.model_fields})
    assert record.policy_versions == versions and record.policy_version == 3
    assert record_row["stale_dropped"] is dropped and record_row["staleness"] == 2
    assert record_row["max_staleness"] == bound
    assert len(record.response_ids) == len(output.response_ids)  # the resumed turn's tokens all kept


def test_no_partial_rollout_loses_the_cut_rollout(setup, monkeypatch):
    """async_training.partial_rollout off: verl's client hands the abort to the sampler, the rollout
    fails and is masked (the recipe keeps partial_rollout on for this reason)."""
    import ray
    from omegaconf import open_dict

    monkeypatch.setattr(verl_async, "CLOCK", verl_async.VersionClock())
    config = setup["config"].copy()
    with open_dict(config):
        config.async_training.partial_rollout = False
    monkeypatch.setattr(setup["client"], "config", config)
    server = setup["server"]
    ray.get(server.set_global_steps.remote(6))
    ray.get(server.sync_during.remote(0, 4, 7))
    output = asyncio.run(build_loop(setup).run({"temperature": 1.0, "logprobs": True}, **{
        TASK_COLUMN: json.dumps(TASKS[1]), "index": 1, "uid": "no-partial", "session_id": 0}))
    info = output.extra_fields["reward_extra_info"]
    assert info["failed"] == 1.0 and info["masked"] == 1.0 and sum(output.response_mask) == 0
    assert info["stale_dropped"] == 0.0  # lost to the abort, not to its age (and not counted twice)
    assert output.extra_fields["insandbox"]["exit_reason"] == "model_error"  # the server's failure, not insandbox's
    assert output.extra_fields["policy_versions"] == [] and output.extra_fields["policy_version"] is None
    # the aborted output still told its version (6, the weights before the sync): verl's tags and the clock have it
    assert output.extra_fields["min_global_steps"] == output.extra_fields["max_global_steps"] == 6
    assert output.extra_fields["current_version"] == 6 and output.extra_fields["staleness"] is None


def test_verls_fully_async_path_from_feed_to_the_trainers_metrics(setup):
    """verl's rollouter steps for one task: its feed (n copies), its FullyAsyncAgentLoopManager (a Ray
    worker that loads our loop from the YAML), the RolloutSample it queues, the trainer's batch
    assembly (assemble_batch_from_rollout_samples: versions, partial-rollout stats), our advantage
    estimator and verl's compute_data_metrics with insandbox's counts."""
    import ray
    from verl.experimental.fully_async_policy.detach_utils import (
        RolloutSample,
        assemble_batch_from_rollout_samples,
        prepare_single_generation_data,
    )
    from verl.experimental.fully_async_policy.fully_async_rollouter import FullyAsyncAgentLoopManager
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.metric_utils import compute_data_metrics
    from verl.trainer.ppo.ray_trainer import compute_advantage
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
    from verl.utils.tokenizer import hf_tokenizer

    import insandbox.rl.trainers.verl_advantage  # noqa: F401  (as VERL_USE_EXTERNAL_MODULES loads it)

    config, server = setup["config"], setup["server"]
    tokenizer = hf_tokenizer(str(setup["model"]))
    ray.get(server.set_global_steps.remote(7))
    ray.get(server.sync_during.remote(0, 4, 9))
    dataset = RLHFDataset(config.data.train_files, tokenizer, config.data)
    batch = prepare_single_generation_data(collate_fn([dataset[0]]), config)
    batch.non_tensor_batch["uid"] = np.array(["uid_sample_0_1"] * len(batch), dtype=object)  # as the rollouter does

    async def generate():
        manager = await FullyAsyncAgentLoopManager.create(config=config, llm_client=setup["client"])
        return await manager.generate_sequences_single(batch)

    out = asyncio.run(generate())
    out.non_tensor_batch["uid"] = batch.non_tensor_batch["uid"]
    sample = RolloutSample(full_batch=out, sample_id="sample_0_1", epoch=0,
                           rollout_status={"count/dropped_stale_samples": 3})
    trained = assemble_batch_from_rollout_samples([sample], tokenizer, config)

    versions = list(trained.non_tensor_batch["policy_version"])
    oldest = [min(v) for v in trained.non_tensor_batch["policy_versions"]]
    assert versions == oldest and set(versions) <= {7, 9} and 7 in versions  # the sync cut a turn sampled at 7
    assert all(v == 9 for v in trained.non_tensor_batch["current_version"])  # the worker's clock saw the sync
    assert trained.meta_info["fully_async/partial/max_partial_span"] == 2  # verl's stat: one rollout spans 7 -> 9
    newest = trained.non_tensor_batch["max_global_steps"]
    assert list(trained.meta_info["trajectory_param_versions"]) == list(newest)
    stale = [bool(v) for v in trained.non_tensor_batch["stale_dropped"]]
    assert stale == [9 - v > 1 for v in versions] and any(stale)
    for i, is_stale in enumerate(stale):
        if is_stale:
            assert int(trained.batch["response_mask"][i].sum()) == 0

    trained.batch["token_level_scores"] = trained.batch["rm_scores"]
    trained.batch["token_level_rewards"] = trained.batch["rm_scores"]
    trained = compute_advantage(trained, adv_estimator="insandbox_rloo", num_repeat=N,
                                config=AlgoConfig(adv_estimator="insandbox_rloo"))
    trained.batch["returns"] = trained.batch["advantages"]
    metrics = compute_data_metrics(batch=trained, use_critic=False)
    assert metrics["rollout/stale_dropped"] == sum(stale)
    assert metrics["rollout/stale_dropped_by_verl"] == 3  # verl's own queue evictions, from its rollout status
    assert metrics["insandbox/masked_rollouts"] >= sum(stale)
