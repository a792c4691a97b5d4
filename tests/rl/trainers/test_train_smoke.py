"""The CPU smoke training end to end, as the manual runs it (docs/rl/smoke.md): tasks built by `insandbox rl build-data`
from the staged public sources, the smoke preset (SmolLM2-135M from the embedded GGUF), real
sandboxes, real TRL GRPO steps. It must end with a finite loss, weights
changed by the policy gradient (a group with reward spread; no weight decay), the environment's
tokens out of the loss TRL computed, rewards in metrics.jsonl and the TensorBoard event files, a
checkpoint that loads, and records that pass the decode check."""
from __future__ import annotations

import json
import math

import pytest
import torch
from trl import GRPOTrainer

from insandbox.rl.rollout.chat import ChatFormat
from insandbox.rl.rollout.check import check_record
from insandbox.rl.trainers.config import load_config
from insandbox.rl.trainers.rollout_hook import records_of
from insandbox.rl.trainers.trl_train import train
from tests.helpers import cli, shared_data

pytestmark = pytest.mark.shared_data


@pytest.fixture(scope="module")
def run(tmp_path_factory, docker_image):
    """Train once; every test reads the same run. TRL's loss inputs are recorded on the way."""
    seen = []
    original = GRPOTrainer._compute_loss

    def recording(self, model, inputs):
        mask = inputs["completion_mask"] * inputs["tool_mask"]
        seen.append((inputs["completion_ids"].clone(), inputs["completion_mask"].clone(), mask.clone()))
        return original(self, model, inputs)

    tasks = tmp_path_factory.mktemp("tasks")
    built = cli("rl", "build-data", "--sources", *sorted(str(p) for p in (shared_data() / "rl_sources").iterdir()
                                                         if p.is_dir()),
                "--out", str(tasks), "--force", "--per-source", "3", "--examples", "0", "--distractors", "1",
                "--max-doc-chars", "1500", "--heldout", "1")
    assert built.returncode == 0, built.stderr
    out = tmp_path_factory.mktemp("smoke")
    config = load_config(None, {"preset": "smoke", "out": str(out), "data": str(tasks / "tasks.jsonl")})
    config.rollout.image = docker_image
    lines = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(GRPOTrainer, "_compute_loss", recording)
        result = train(config, echo=lines.append)
    return {"result": result, "out": out, "lines": lines, "seen": seen, "config": config, "tasks": tasks}


def metrics(run) -> list[dict]:
    return [json.loads(line) for line in (run["out"] / "metrics.jsonl").read_text().splitlines()]


def records(run) -> list:
    return [r for path in sorted((run["out"] / "rollouts").glob("step-*.jsonl")) for r in records_of(path)]


def test_every_step_has_a_finite_loss_and_logged_rewards(run):
    rows = metrics(run)
    assert [r["step"] for r in rows] == [1, 2] and run["result"].steps == 2
    n = run["config"].grpo.num_generations
    for row in rows:
        assert math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])
        step_records = records_of(run["out"] / row["records"])
        assert row["rollouts"] == len(step_records) == n
        scored = [r.reward for r in step_records if not r.masked]  # masked rollouts carry no reward (issue 22)
        assert row["reward_mean"] == pytest.approx(sum(scored) / len(scored))
        assert row["trl"]["reward"] == pytest.approx(row["reward_mean"])  # TRL logs the true reward, not x G/(G-1)
        assert sum(row["exit_reasons"].values()) == n and row["check_mismatches"] == 0
        assert row["time"]["rollout_s"] > 0 and row["time"]["train_s"] > 0
    console = [line for line in run["lines"] if line.startswith("[train] step")]
    assert len(console) == 2 and "reward" in console[0] and "exits:" in console[0]


def test_the_weights_changed_because_a_group_had_reward_spread(run):
    from transformers import AutoModelForCausalLM

    from insandbox.rl.trainers.policy import load_policy_model

    assert any(row["groups_with_spread"] > 0 for row in metrics(run))
    trained = AutoModelForCausalLM.from_pretrained(str(run["result"].final))  # the checkpoint loads
    initial, _ = load_policy_model(run["config"])
    changed = [name for name, p in trained.named_parameters()
               if not torch.equal(p, dict(initial.named_parameters())[name])]
    assert changed, "no parameter moved"
    # weight decay is 0 in the preset: a parameter moves only when its gradient is non-zero, which in
    # GRPO without KL needs a group whose rewards differ
    assert run["config"].grpo.weight_decay == 0.0


def test_the_loss_mask_trl_used_zeroes_every_environment_token(run):
    by_ids = {tuple(r.response_ids): r for r in records(run)}
    trained_tokens = 0
    for ids, completion_mask, loss_mask in run["seen"]:
        for row in range(ids.shape[0]):
            length = int(completion_mask[row].sum())
            record = by_ids[tuple(ids[row, :length].tolist())]
            expected = [0] * length if record.masked else record.response_mask  # a masked rollout: no loss
            assert loss_mask[row, :length].tolist() == expected
            assert loss_mask[row, length:].sum() == 0
            trained_tokens += int(loss_mask[row].sum())
    all_records = records(run)
    g = run["config"].grpo
    assert len(run["seen"]) == 2 * g.num_generations // g.micro_batch  # every micro-batch of both steps
    assert trained_tokens == sum(sum(r.response_mask) for r in all_records if not r.masked)  # model tokens only
    assert any(0 in r.response_mask for r in all_records)  # there were environment tokens to mask
    assert trained_tokens == sum(row["trained_tokens"] for row in metrics(run))


def test_tensorboard_has_trls_and_the_rollouts_scalars(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run["out"] / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "train/grad_norm", "train/rollout/reward_mean", "train/rollout/sandbox_share",
            "train/rollout/rollouts_per_min", "train/rollout/tool_calls_per_rollout"} <= tags
    assert any(t.startswith("train/rollout/exit/") for t in tags)
    rewards = [e.value for e in events.Scalars("train/rollout/reward_mean")]
    assert rewards == pytest.approx([row["reward_mean"] for row in metrics(run)])


def test_the_checkpoint_and_the_records_are_usable(run):
    from transformers import AutoTokenizer

    final = run["result"].final
    assert (final / "config.json").is_file() and (final / "model.safetensors").is_file()
    tokenizer = AutoTokenizer.from_pretrained(str(final))
    assert tokenizer.eos_token == "<|im_end|>"  # the turn end, not the GGUF's <|im_start|>
    chat = ChatFormat(tokenizer, records(run)[0].trajectory["tools"])  # the saved tokenizer renders them the same
    for record in records(run):
        assert check_record(record, chat) == [], record.id
    summary = json.loads((run["out"] / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["rollouts"] == 2 * run["config"].grpo.num_generations
    assert summary["check_mismatches"] == 0
    assert set(summary["phases"]) == {"load_s", "rollout_s", "train_s", "save_s", "total_s"}


def test_before_and_after_side_by_side_with_insandbox_bench(run, tmp_path):
    """The manual's evaluation (docs/rl/export-evaluate.md): the checkpoint exported to GGUF, the base and the
    trained model benched on held-out tasks with the training rewards as the scorer, and one report over both runs."""
    from tests.helpers import REPO

    trained = tmp_path / "trained.gguf"
    exported = cli("rl", "export", str(run["result"].final), "--out", str(trained), timeout=900)
    assert exported.returncode == 0, exported.stderr[-2000:]
    task = str(REPO / "examples" / "rl" / "context_tasks.yaml")
    common = ["bench", task, "--data", str(run["tasks"] / "heldout.jsonl"), "--limit", "1", "--max-steps", "2",
              "--concurrency", "1", "-q"]
    base = cli(*common, "--out", str(tmp_path / "before"), timeout=900)
    assert base.returncode == 0, base.stdout[-2000:] + base.stderr[-2000:]
    after = cli(*common, "--gguf", str(trained), "--out", str(tmp_path / "after"), timeout=900)
    assert after.returncode == 0, after.stdout[-2000:] + after.stderr[-2000:]
    report = cli("report", str(tmp_path / "before"), str(tmp_path / "after"), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr[-2000:]
    data = json.loads((tmp_path / "report" / "report.json").read_text())
    rows = {r["model"]: r for r in data["accuracy"]}
    assert set(rows) == {"SmolLM2-135M-Instruct.Q4_1", "trained"}  # the trained GGUF is served and named as such
    for row in rows.values():
        assert row["task"] == "context_tasks" and row["n"] == 1 and row["errors"] == 0 and row["unscored"] == 0
        assert row["score_method"].startswith("insandbox.rl.rewards")
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "SmolLM2-135M-Instruct.Q4_1" in markdown and "trained" in markdown
