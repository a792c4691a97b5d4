"""Infrastructure faults for the trainers' tests, injected at the environment after the policy sampled
its first turn, so a faulty rollout holds real sampled tokens whatever the model wrote:

    "engine"  the sandbox engine fails (a SandboxError, not the model's doing): sandbox_error, masked
    "slow"    the first step never returns: the rollout runs into its time limit (time_limit), masked
"""
from __future__ import annotations

import asyncio
import contextvars
import copy
from collections.abc import Callable
from typing import Optional

from insandbox.agent.env import SandboxEnv
from insandbox.rl.rollout.runner import Rollouts
from insandbox.sandbox.base import SandboxError

_FAULT: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("insandbox_test_fault", default=None)


def inject(monkeypatch, choose: Callable[[dict, int], Optional[str]], timeout_s: float = 30.0) -> None:
    """choose(row, sample): the fault for that rollout (its number in its group), or None."""
    run, step = Rollouts.run, SandboxEnv.step

    async def faulty_run(self, row, generate, group=0, sample=0):
        fault = choose(row, sample)
        _FAULT.set(fault)  # seen by this rollout's own task (wait_for copies the context)
        if fault == "slow":
            self = copy.copy(self)
            self.config = self.config.model_copy(update={"time_limit": timeout_s})
        return await run(self, row, generate, group, sample)

    async def faulty_step(self, *args, **kwargs):
        fault = _FAULT.get()
        if fault == "engine":
            raise SandboxError("the Docker engine stopped answering")
        if fault == "slow":
            await asyncio.sleep(3600)
        return await step(self, *args, **kwargs)

    monkeypatch.setattr(Rollouts, "run", faulty_run)
    monkeypatch.setattr(SandboxEnv, "step", faulty_step)
