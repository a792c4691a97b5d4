"""One episode's state, and the one place that decides it is over and why.

Every exit reason is an `ExitReason`; the loop, the runner, the console, the CLI's exit
status and the benchmark runner all read them from here. The limits (steps, tokens, wall
time, a stuck loop) are checked by `Episode.after_step`; failures map to reasons in
`Episode.end_on_error`. Whoever ends an episode first wins: a later end is ignored, so
an error while cleaning up cannot overwrite why the episode really stopped.

A time limit says where the time went (`exit_cause`), from the host's own clock: the loop
times each model request (`timing("model")`) and the env each tool call (`timing("tools")`),
a phase still running when the limit fires included. The ending is the model's ("commands")
when its tool calls took at least half of the episode's time so far; otherwise the time went
to waiting on the model server, or on the sandbox's start, and it is "infrastructure". RL masks
only the latter (rl/rollout/runner.py) and penalises the former like running out of steps.
"""
from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Optional

from . import defaults

# the detail of an interrupted episode (shown after its exit reason: "interrupted (Ctrl-C or SIGTERM)")
INTERRUPTED_DETAIL = "Ctrl-C or SIGTERM"


class ExitReason(str, Enum):
    """Why an episode ended. The values are what trajectory.json and results.jsonl hold."""

    SUBMITTED = "submitted"  # the model called submit
    COMPLETED = "completed"  # plain mode: the single completion came back
    MAX_STEPS = "max_steps"
    TOKEN_BUDGET = "token_budget"
    TIME_LIMIT = "time_limit"
    CONTEXT_LENGTH = "context_length"  # the conversation no longer fits the model's context
    STUCK = "stuck"  # the same calls with the same results, too many times in a row
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM
    MODEL_ERROR = "model_error"  # the model server failed after retries
    SANDBOX_ERROR = "sandbox_error"  # the container or engine failed
    INTERNAL_ERROR = "internal_error"  # a bug in insandbox; exit_detail has the traceback's last line

    def __str__(self) -> str:
        return self.value

    @property
    def is_failure(self) -> bool:
        """The run did not end on the model's own terms: infrastructure or insandbox failed.
        The CLI exits 1, the benchmark retries the sample and keeps it apart from wrong answers."""
        return self in (ExitReason.MODEL_ERROR, ExitReason.SANDBOX_ERROR, ExitReason.INTERNAL_ERROR)

    @property
    def is_limit(self) -> bool:
        """The episode hit one of its limits (the model's answer, if any, is still scored)."""
        return self in (ExitReason.MAX_STEPS, ExitReason.TOKEN_BUDGET, ExitReason.TIME_LIMIT,
                        ExitReason.CONTEXT_LENGTH, ExitReason.STUCK, ExitReason.INTERRUPTED)


@dataclass
class Limits:
    max_steps: int = defaults.MAX_STEPS  # model turns
    token_budget: Optional[int] = None  # prompt + completion tokens over the episode
    time_limit: Optional[float] = None  # seconds of wall time, sandbox start included
    # this many identical steps in a row (same calls, same results); None: off
    stuck_after: Optional[int] = defaults.STUCK_AFTER


class Episode:
    def __init__(self, limits: Optional[Limits] = None):
        self.limits = limits or Limits()
        self.started = time.monotonic()
        self.steps = 0
        self.tokens = 0
        self.exit_reason: Optional[ExitReason] = None
        self.exit_detail: Optional[str] = None
        # a failure's: "sandbox" (its own processes) or "infrastructure"; a time limit's: "commands" or "infrastructure"
        self.exit_cause: Optional[str] = None
        self.spent = {"model": 0.0, "tools": 0.0}  # seconds waiting on the model server, in the model's tool calls
        self._phase: Optional[tuple[str, float]] = None  # the one running now, and since when
        self._last_step: Optional[Hashable] = None
        self._repeats = 0

    @property
    def done(self) -> bool:
        return self.exit_reason is not None

    @property
    def submitted(self) -> bool:
        return self.exit_reason is ExitReason.SUBMITTED

    @property
    def steps_left(self) -> int:
        return max(self.limits.max_steps - self.steps, 0)

    def time_left(self) -> Optional[float]:
        """Seconds until the time limit (None: no limit); the loop bounds each wait with it."""
        if self.limits.time_limit is None:
            return None
        return max(self.limits.time_limit - (time.monotonic() - self.started), 0.0)

    def restart_clock(self) -> None:
        """The time limit counts from now, and so does where the time went (a fork's branch)."""
        self.started = time.monotonic()
        self.spent = dict.fromkeys(self.spent, 0.0)

    @contextmanager
    def timing(self, phase: str) -> Iterator[None]:
        """Count the time inside the block as `phase`'s: "model" (a model request) or "tools" (a tool call)."""
        start = time.monotonic()
        self._phase = (phase, start)
        try:
            yield
        finally:
            self.spent[phase] += time.monotonic() - start
            self._phase = None

    def seconds_in(self, phase: str) -> float:
        """`phase`'s time so far, a block still running included."""
        running = time.monotonic() - self._phase[1] if self._phase and self._phase[0] == phase else 0.0
        return self.spent[phase] + running

    def end(self, reason: ExitReason, detail: Optional[str] = None, cause: Optional[str] = None) -> None:
        if self.exit_reason is None:
            self.exit_reason, self.exit_detail = ExitReason(reason), detail
            self.exit_cause = cause or ("infrastructure" if self.exit_reason.is_failure else None)

    def after_step(self, tokens: int = 0, submitted: bool = False, signature: Optional[Hashable] = None) -> None:
        """Count a finished step and end the episode if it submitted or reached a limit."""
        self.steps += 1
        self.tokens += tokens
        if signature is None:
            self._last_step, self._repeats = None, 0
        elif signature == self._last_step:
            self._repeats += 1
        else:
            self._last_step, self._repeats = signature, 1
        lim = self.limits
        if submitted:
            self.end(ExitReason.SUBMITTED)
        elif self.steps >= lim.max_steps:
            self.end(ExitReason.MAX_STEPS, f"no submit within {lim.max_steps} steps")
        elif lim.token_budget is not None and self.tokens >= lim.token_budget:
            self.end(ExitReason.TOKEN_BUDGET, f"{self.tokens:,} tokens used, budget {lim.token_budget:,}")
        elif lim.stuck_after and signature is not None and self._repeats >= lim.stuck_after:
            self.end(ExitReason.STUCK, f"the same tool calls with the same results {self._repeats} times in a row")
        elif self.time_left() == 0.0:
            self.end_on_time()

    def end_on_time(self, detail: Optional[str] = None) -> None:
        """End on the time limit (`detail`: what the limit was, when not the episode's own), saying where the time
        went: "commands" when the model's tool calls took at least half of it, else "infrastructure"."""
        elapsed = time.monotonic() - self.started
        tools, model = self.seconds_in("tools"), self.seconds_in("model")
        cause = "commands" if tools * 2 >= elapsed else "infrastructure"
        said = detail or f"time limit of {self.limits.time_limit:g}s reached"
        self.end(ExitReason.TIME_LIMIT, f"{said}: {tools:.1f}s of {elapsed:.1f}s in the model's commands, "
                                        f"{model:.1f}s waiting on the model server", cause)

    def end_on_error(self, error: BaseException) -> ExitReason:
        """Map a failure to its exit reason (and end the episode with it)."""
        from .errors import ContextLengthError, ModelError, SandboxBrokenByItself, SandboxError, SetupError

        if isinstance(error, ContextLengthError):
            reason = ExitReason.CONTEXT_LENGTH
        elif isinstance(error, ModelError):
            reason = ExitReason.MODEL_ERROR
        elif isinstance(error, (SandboxError, SetupError)):
            reason = ExitReason.SANDBOX_ERROR
        elif isinstance(error, asyncio.CancelledError):
            reason = ExitReason.INTERRUPTED
        else:
            reason = ExitReason.INTERNAL_ERROR
        if reason is ExitReason.INTERRUPTED:
            detail = INTERRUPTED_DETAIL
        elif reason is ExitReason.INTERNAL_ERROR:
            where = traceback.extract_tb(error.__traceback__)[-1:] if error.__traceback__ else []
            at = f" at {Path(where[0].filename).name}:{where[0].lineno}" if where else ""
            detail = f"insandbox failed{at} (please report it): {type(error).__name__}: {error}"
        else:
            detail = str(error)
        self.end(reason, detail, "sandbox" if isinstance(error, SandboxBrokenByItself) else None)
        return reason
