"""Benchmarks: scorers on the dev sets, each task end to end in both modes, resume, the report."""
from __future__ import annotations


def test_intervals_over_items_when_items_repeat():
    from insandbox.bench import stats

    recs = [{"id": i, "repeat": k, "score": s} for i, ss in (("a", (1, 1)), ("b", (1, 0)), ("c", (0, 0)))
            for k, s in enumerate(ss)]
    acc = stats.accuracy(recs)
    # item means 1, 0.5, 0: mean 0.5, sd 0.5, t(0.975, 2) = 4.3027 -> half-width 1.242, clipped to [0, 1]
    assert acc["accuracy"] == 0.5 and acc["items"] == 3 and acc["ci_method"] == "t over item means"
    assert acc["ci95"] == [0.0, 1.0]


