"""How long the rest of a benchmark session will take, from the samples of this session.

Each sample still waiting is expected to take the mean duration of the samples finished in
this session (samples done by an earlier session of a resumed run say nothing about now).
A sample in flight is expected to need what samples that ran at least as long took beyond
that point (on average); once it has run longer than every finished sample there is no
such evidence, and the estimate becomes a lower bound. Waiting samples take the first free
slot of `concurrency`, as the runner's gate hands them out. Before any sample has finished
there is no estimate at all.
"""
from __future__ import annotations

import heapq
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class Estimate:
    seconds: float
    lower_bound: bool  # a sample in flight has run longer than any finished one: it may take longer still


@dataclass
class SessionEta:
    todo: int  # samples this session has to run
    concurrency: int
    running: dict[Hashable, float] = field(default_factory=dict)  # sample -> when it started
    durations: list[float] = field(default_factory=list)  # of the samples finished in this session
    finished: int = 0

    def start(self, sample: Hashable, at: float) -> None:
        self.running[sample] = at

    def finish(self, sample: Hashable, at: float) -> None:
        self.finished += 1
        started = self.running.pop(sample, None)
        if started is not None:
            self.durations.append(max(0.0, at - started))

    def estimate(self, now: float) -> Optional[Estimate]:
        """Seconds until the last sample of the session finishes; None until one has finished."""
        if not self.durations:
            return None
        mean = sum(self.durations) / len(self.durations)
        slots, lower_bound = [], False
        for started in self.running.values():
            ran = now - started
            longer = [d - ran for d in self.durations if d > ran]
            lower_bound |= not longer
            slots.append(sum(longer) / len(longer) if longer else 0.0)
        slots += [0.0] * max(0, min(self.concurrency, self.todo) - len(slots))
        waiting = max(0, self.todo - self.finished - len(self.running))
        if waiting and not slots:
            slots = [0.0]
        heapq.heapify(slots)
        for _ in range(waiting):  # each waiting sample on the slot that frees first
            heapq.heappush(slots, heapq.heappop(slots) + mean)
        return Estimate(max(slots, default=0.0), lower_bound)


def format_eta(estimate: Optional[Estimate]) -> str:
    if estimate is None:
        return "eta ?"
    minutes, seconds = divmod(int(round(estimate.seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    clock = f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
    return f"eta {'≥' if estimate.lower_bound else ''}{clock}"
