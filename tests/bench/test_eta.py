"""Point l (first half): the benchmark's ETA comes from this session's sample durations, concurrency and the
samples in flight, and says "?" until a sample has finished. Pure: no Docker, no terminal, no clock."""
from __future__ import annotations

import io
import json

from rich.console import Console

from insandbox.bench.eta import Estimate, SessionEta, format_eta
from insandbox.bench.progress import EtaColumn, RichBenchProgress
from insandbox.bench.runner import BenchConfig, run_bench
from insandbox.config import RunConfig


def _session(todo: int, concurrency: int, starts: dict, finishes: dict) -> SessionEta:
    eta = SessionEta(todo=todo, concurrency=concurrency)
    for sample, at in starts.items():
        eta.start(sample, at)
    for sample, at in finishes.items():
        eta.finish(sample, at)
    return eta


def test_no_estimate_until_a_sample_has_finished():
    eta = _session(6, 2, {"a": 0.0, "b": 0.0}, {})
    assert eta.estimate(500.0) is None and format_eta(eta.estimate(500.0)) == "eta ?"


def test_estimate_from_durations_concurrency_and_samples_in_flight():
    # a and b took 10 s each; c and d started at 10 and have run 4 s; e and f wait for a slot
    starts, finishes = {"a": 0.0, "b": 0.0, "c": 10.0, "d": 10.0}, {"a": 10.0, "b": 10.0}
    two_slots = _session(6, 2, starts, finishes).estimate(14.0)
    assert two_slots == Estimate(16.0, False)  # c, d need 6 s more, then e, f 10 s on the slots they free
    four_slots = _session(6, 4, starts, finishes).estimate(14.0)
    assert four_slots == Estimate(10.0, False)  # e and f start now on the two idle slots
    one_left = _session(3, 2, {"a": 0.0, "b": 0.0, "c": 10.0}, {"a": 10.0, "b": 10.0}).estimate(14.0)
    assert one_left == Estimate(6.0, False)  # nothing waits: only c, in flight


def test_a_sample_in_flight_is_expected_to_run_like_those_that_ran_as_long():
    # finished: 10 s and 40 s; g has run 20 s, so it is one of the long ones: 20 s more, not 25 - 20 = 5
    eta = _session(3, 3, {"a": 0.0, "b": 0.0, "g": 30.0}, {"a": 10.0, "b": 40.0})
    assert eta.estimate(50.0) == Estimate(20.0, False)


def test_a_sample_running_longer_than_any_finished_one_makes_the_estimate_a_lower_bound():
    eta = _session(4, 2, {"a": 0.0, "b": 0.0}, {"a": 10.0})  # b has run 30 s, a took 10
    est = eta.estimate(30.0)
    assert est == Estimate(10.0, True)  # b: unknown (0 counted); the two waiting: 10 s each on the free slots
    assert format_eta(est) == "eta ≥0:10"
    assert format_eta(Estimate(3725.4, False)) == "eta 1:02:05"


def test_the_bar_counts_only_this_session_and_says_so_before_a_sample_finished(tmp_path):
    progress = RichBenchProgress(Console(file=io.StringIO(), width=120), label="chem")
    progress.on_start(20, 17, tmp_path, 4)  # a resumed run: 17 done by an earlier session
    try:
        assert (progress.eta.todo, progress.eta.concurrency) == (3, 4)
        progress.on_sample_start("q1", "llm", 0)
        assert EtaColumn(progress.eta).render(None).plain == "eta ?"
        progress.on_sample({"id": "q1", "mode": "llm", "repeat": 0, "score": 1.0})
        assert progress.eta.finished == 1 and len(progress.eta.durations) == 1
        assert EtaColumn(progress.eta).render(None).plain != "eta ?"  # now from the finished sample
    finally:
        progress.close()


class Recorder:
    """A BenchProgress that writes down what the runner tells it."""

    def __init__(self):
        self.events: list[tuple] = []

    def on_status(self, text): pass

    def on_progress(self, text): pass

    def on_start(self, total, already_done, run_dir, concurrency):
        self.events.append(("begin", total, already_done, concurrency))

    def on_sample_start(self, row_id, mode, repeat):
        self.events.append(("start", row_id, mode, repeat))

    def on_sample(self, record):
        self.events.append(("finish", record["id"], record["mode"], record["repeat"]))


def test_the_runner_says_when_each_sample_starts(scripted, run_async, tmp_path):
    rows = [{"id": f"r{i}", "problem_statement": f"question {i}", "ground_truth": "A"} for i in range(5)]
    srv = scripted({"scripts": [{"match": r["problem_statement"], "llm_turns": [{"content": "Answer: A"}]}
                                for r in rows]})
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rec = Recorder()
    cfg = BenchConfig(task="chem", data=data, mode="llm", concurrency=2, output_dir=tmp_path / "run",
                      run=RunConfig(model="m", base_url=srv.url))
    run_async(run_bench(cfg, rec))
    assert rec.events[0] == ("begin", 5, 0, 2)
    in_flight, most = set(), 0
    for kind, *sample in rec.events[1:]:
        if kind == "start":
            in_flight.add(tuple(sample))
            most = max(most, len(in_flight))
        else:
            assert tuple(sample) in in_flight  # every sample finishes after it started
            in_flight.remove(tuple(sample))
    assert not in_flight and most <= 2
    assert sum(1 for e in rec.events if e[0] == "start") == 5
