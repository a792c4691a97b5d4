"""Rollouts produced ahead (grpo.async_steps): real TRL GRPO steps on a tiny model with scripted rollouts
(tests/rl/trainers/tiny_trl.py): k = 0 is the synchronous hook as it was; k = 1 samples the next batch
while a step trains, never more than k batches ahead; weights reach the rollout copy between two
generate calls only; stale records leave the loss and are counted; a batch TRL asks for that was not
planned is produced synchronously."""
from __future__ import annotations

import threading

import pytest
import torch
from transformers import TrainerCallback
from trl import GRPOTrainer

from insandbox.rl.trainers import async_rollouts
from insandbox.rl.trainers.async_rollouts import RolloutWeights, stage_weights_callback
from insandbox.rl.trainers.rollout_hook import SandboxRollouts
from tests.rl.trainers import tiny_trl
from tests.rl.trainers.sync_before import InSandboxGRPOTrainerBefore, SandboxRolloutsBefore

LOSS_INPUTS = ("prompt_ids", "completion_ids", "completion_mask", "tool_mask", "advantages")


def train(tmp_path, hook, callbacks=(), trainer_class=None, **grpo):
    """Train; TRL's loss inputs are recorded on the way."""
    seen = []
    original = GRPOTrainer._compute_loss

    def recording(self, model, inputs):
        seen.append({k: inputs[k].clone() for k in LOSS_INPUTS})
        return original(self, model, inputs)

    trainer = tiny_trl.trainer(tmp_path, hook, list(callbacks), trainer_class, **grpo)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(GRPOTrainer, "_compute_loss", recording)
        try:
            trainer.train()
        finally:
            hook.close() if hasattr(hook, "close") else None
    return trainer, seen


def ahead(tmp_path, k=1, probe=None, **grpo):
    rollouts = tiny_trl.ScriptedRollouts()
    config = tiny_trl.config(tmp_path, async_steps=k, **grpo)
    hook = SandboxRollouts(rollouts, tiny_trl.rows(), tmp_path, 2, async_steps=k,
                           max_staleness=config.max_staleness(), steps_per_batch=config.steps_per_batch())
    callbacks = ([probe(hook)] if probe else []) + [stage_weights_callback(hook)]
    trainer, seen = train(tmp_path, hook, callbacks, async_steps=k, **grpo)
    return hook, trainer, seen, rollouts


def test_k0_is_the_synchronous_run_as_it_was(tmp_path):
    now = SandboxRollouts(tiny_trl.ScriptedRollouts(), tiny_trl.rows(), tmp_path / "now", 2)
    trainer_now, seen_now = train(tmp_path / "now", now)
    before = SandboxRolloutsBefore(tiny_trl.ScriptedRollouts(), tiny_trl.rows(), tmp_path / "before", 2)
    trainer_before, seen_before = train(tmp_path / "before", before, trainer_class=InSandboxGRPOTrainerBefore)

    assert now.producer is None and now.weights is None  # nothing ahead, no copy of the policy
    assert len(now.batches) == len(before.batches) == 3
    for b_now, b_before in zip(now.batches, before.batches):
        records_now = [r.model_dump(exclude={"policy_versions", "policy_version", "timings"})
                       for r in _records(b_now)]
        records_before = [r.model_dump(exclude={"policy_versions", "policy_version", "timings"})
                          for r in _records(b_before)]
        assert records_now == records_before  # ids, tokens, masks, logprobs, rewards
        assert {r.policy_version for r in _records(b_now)} == {b_now.step - 1}  # the trainer's step sampled them
        assert b_now.stale_dropped == 0 and not b_now.ahead and b_now.wait_s is None
    assert len(seen_now) == len(seen_before)
    for a, b in zip(seen_now, seen_before):  # TRL trained on the same tensors
        for key in LOSS_INPUTS:
            assert torch.equal(a[key], b[key]), key
    losses = [(h["loss"], h["grad_norm"], h["reward"]) for h in trainer_now.state.log_history if "loss" in h]
    assert losses == [(h["loss"], h["grad_norm"], h["reward"]) for h in trainer_before.state.log_history
                      if "loss" in h]
    assert not any(k.startswith("off_policy/") for h in trainer_now.state.log_history for k in h)
    for p, q in zip(trainer_now.model.parameters(), trainer_before.model.parameters()):
        assert torch.equal(p, q)


def _records(batch):
    from insandbox.rl.trainers.rollout_hook import records_of

    return records_of(batch.records_file)


class Probe(TrainerCallback):
    """At the end of step s (before the weights are staged): the producer must have started the batch of
    step s+1 while step s trained, and must not have started the one of step s+2 (it needs version s)."""

    def __init__(self, hook):
        self.hook = hook
        self.seen: list[tuple] = []

    def on_step_end(self, args, state, control, **kwargs):
        producer, s = self.hook.producer, state.global_step
        producer.events.append(("step_end", s))
        if s >= state.max_steps:
            return
        started = threading.Event()
        for _ in range(600):  # the producer is free to start it: it needs version s-1, staged a step ago
            if any(e[:2] == ("start", s) for e in list(producer.events)):
                started.set()
                break
            threading.Event().wait(0.1)
        self.seen.append((s, started.is_set(), any(e[:2] == ("start", s + 1) for e in list(producer.events))))


def test_k1_samples_the_next_batch_while_a_step_trains_and_never_further(tmp_path):
    probes = []

    def probe(hook):
        probes.append(Probe(hook))
        return probes[0]

    hook, trainer, _, rollouts = ahead(tmp_path, k=1, probe=probe, max_steps=4)
    events = hook.producer.events
    # batch s (0-based: the batch of step s+1) started before step s ended; batch s+1 had not
    assert probes[0].seen == [(1, True, False), (2, True, False), (3, True, False)]
    assert events.index(("step_end", 1)) > next(i for i, e in enumerate(events) if e[:2] == ("start", 1))
    # the bound: batch b starts with weights of version >= b - k, and is taken at global step b
    starts = {e[1]: e[2] for e in events if e[0] == "start"}
    assert sorted(starts) == [0, 1, 2, 3]
    assert all(version >= b - 1 for b, version in starts.items())
    assert [e[1:] for e in events if e[0] == "taken"] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    for batch in hook.batches:
        assert batch.ahead and not batch.plan_mismatch and batch.stale_dropped == 0
        for record in _records(batch):
            assert all(batch.step - 1 - v <= 1 for v in record.policy_versions)  # within k versions
    assert max(b.staleness_max for b in hook.batches) == 1  # it did run ahead
    assert any(v not in (None, 0) for *_, v in rollouts.calls)  # and the copy received trained weights
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert any(h.get("off_policy/tokens", 0) > 0 for h in logged)  # the IS correction saw off-policy tokens


def test_weights_reach_the_copy_between_generate_calls(tmp_path):
    hook, _, _, rollouts = ahead(tmp_path, k=1, max_steps=3)
    events = hook.weights.events
    assert any(e[0] == "applied" for e in events)
    open_call = None
    for e in events:
        if e[0] == "generate" and e[2] == "start":
            assert open_call is None
            open_call = e[1]
        elif e[0] == "generate":
            assert open_call == e[1]
            open_call = None
        else:  # "applied": never inside a call
            assert open_call is None, f"weights {e[1]} applied during a generate call of version {open_call}"
    # every turn is stamped with the version its call sampled with, in the order of the calls
    assert [v for *_, v in rollouts.calls] == [e[1] for e in events if e[0] == "generate" and e[2] == "end"]


def test_a_weight_update_waits_for_the_generate_call_in_flight():
    policy = tiny_trl.model(0)
    weights = RolloutWeights(policy, version=0)
    trained = tiny_trl.model(1)  # other weights, as after an optimizer step
    inside, release, seen = threading.Event(), threading.Event(), {}

    def one_call():
        with weights.turn() as version:
            inside.set()
            release.wait(10)
            seen["version"] = version
            seen["weights"] = [p.clone() for p in weights.model.parameters()]

    call = threading.Thread(target=one_call)
    call.start()
    assert inside.wait(10)
    weights.stage(trained, 1)  # the trainer does not wait for the call
    assert weights.version == 0
    release.set()
    call.join(10)
    assert seen["version"] == 0
    assert all(torch.equal(a, b) for a, b in zip(seen["weights"], policy.parameters()))  # untouched during it
    with weights.turn() as version:  # the next call takes them in first
        assert version == 1
        assert all(torch.equal(a, b) for a, b in zip(weights.model.parameters(), trained.parameters()))
    assert [e for e in weights.events if e[0] == "applied"] == [("applied", 1)]
    assert all(not p.requires_grad for p in weights.model.parameters())


def test_stale_records_leave_the_loss_and_are_counted(tmp_path):
    hook, trainer, seen, _ = ahead(tmp_path, k=1, max_staleness=0, max_steps=3)
    dropped = {b.step: b.stale_dropped for b in hook.batches}
    assert dropped[1] == 0  # sampled by version 0, trained at 0
    assert all(dropped[s] > 0 for s in (2, 3))  # sampled a version behind at least partly: out
    per_step = len(seen) // len(hook.batches)  # TRL's micro-batches of each step, rows shuffled
    for i, batch in enumerate(hook.batches):
        records = _records(batch)
        stale = {r.id for r in records if r.policy_version is not None and r.policy_version < batch.step - 1}
        assert len(stale) == batch.stale_dropped
        inputs = seen[i * per_step:(i + 1) * per_step]
        trained = sum(int((x["completion_mask"] * x["tool_mask"]).sum()) for x in inputs)
        assert trained == sum(sum(r.response_mask) for r in records if r.id not in stale)  # only the fresh ones
        assert batch.model_tokens == trained
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert [h["rollout/stale_dropped"] for h in logged] == [float(dropped[s]) for s in (1, 2, 3)]


def test_a_batch_not_planned_is_produced_synchronously(tmp_path, monkeypatch):
    real_plan = async_rollouts.plan_batches

    def wrong_second(trainer, batches):
        plan = real_plan(trainer, batches)
        other = next(t for t in tiny_trl.TASKS if t not in plan[1])
        plan[1] = [other] * len(plan[1])  # the producer's guess for batch 1 will not be what TRL asks
        guessed.append(plan[1])
        return plan

    guessed: list = []

    monkeypatch.setattr(async_rollouts, "plan_batches", wrong_second)
    hook, _, _, rollouts = ahead(tmp_path, k=1, max_steps=3, num_generations=2)
    first, second, third = hook.batches
    assert first.ahead and third.ahead and not first.plan_mismatch
    assert second.plan_mismatch and not second.ahead
    assert {r.policy_version for r in _records(second)} == {1}  # sampled here, by the trainer's own weights
    assert ("discarded", 1) in hook.producer.events
    assert sorted(r.task_id for r in _records(second)) != sorted(guessed[0])  # TRL's prompts, not the guess
