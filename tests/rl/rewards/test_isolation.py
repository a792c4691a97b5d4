"""The worker pool: timeouts kill, crashes and exceptions become error replies, the event loop and
other calls keep going, workers go away with their parent."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from insandbox.rl.rewards import isolation
from insandbox.rl.rewards.isolation import WorkerPool

TARGET = "tests.rl.rewards.misbehaving:dispatch"
HANG_BOUND_S = 60  # far above any timeout used here: only proves that a call did not hang


@pytest.fixture
def pool():
    made = WorkerPool(TARGET, size=2)
    yield made
    made.close()


def test_a_call_holding_the_gil_is_killed_at_its_timeout_and_its_worker_replaced():
    single = WorkerPool(TARGET, size=1)
    try:
        before = single.call(["pid"], 10).result
        started = time.monotonic()
        reply = single.call(["hold_the_gil"], 1)
        assert time.monotonic() - started < HANG_BOUND_S
        assert reply.result is None and reply.error == "timeout: scoring took longer than 1 s; worker killed"
        assert single.call(["pid"], 10).result != before
    finally:
        single.close()
    with pytest.raises(ProcessLookupError):
        os.kill(before, 0)  # the killed worker is gone, and reaped


def test_the_event_loop_keeps_running_while_a_worker_hangs(pool):
    async def body():
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.ensure_future(tick())
        hanging = asyncio.ensure_future(pool.call_async(["hold_the_gil"], 1))
        quick = await pool.call_async(["echo", "still answering"], 10)  # the other worker
        reply = await hanging
        ticker.cancel()
        return ticks, quick, reply

    ticks, quick, reply = asyncio.run(body())
    assert quick.result == "still answering"
    assert reply.error.startswith("timeout")
    assert ticks > 0


def test_a_crash_is_an_error_reply_and_the_next_call_gets_a_new_worker(pool):
    reply = pool.call(["crash"], 10)
    assert reply.error == "scoring worker died while scoring (exit code 3)"
    assert pool.call(["echo", 1], 10).result == 1


def test_an_exception_is_an_error_reply_and_the_worker_is_kept(pool):
    first = pool.call(["pid"], 10).result
    assert pool.call(["fail"], 10).error == "ValueError: broken row"
    assert pool.call(["unserialisable"], 10).error == "TypeError: Object of type object is not JSON serializable"
    assert pool.call(["pid"], 10).result == first


def test_arguments_that_are_not_json_are_an_error_reply_and_cost_no_worker(pool):
    first = pool.call(["pid"], 10).result
    assert pool.call(["echo", {1, 2}], 10).error == "TypeError: Object of type set is not JSON serializable"
    assert pool.call(["pid"], 10).result == first


def test_what_a_target_prints_does_not_corrupt_replies(pool):
    assert pool.call(["noisy", {"a": [1, "\udcff"]}], 10).result == {"a": [1, "\udcff"]}  # a lone surrogate too


def test_a_worker_that_cannot_start_is_an_error_reply():
    broken = WorkerPool("tests.rl.rewards.no_such_module:f", size=1)
    try:
        reply = broken.call([], 10)
    finally:
        broken.close()
    assert reply.error.startswith("scoring worker failed to start: tests.rl.rewards.no_such_module:f: "
                                  "ModuleNotFoundError")


def test_many_concurrent_calls_across_event_loops(pool):
    async def batch(offset):
        return await asyncio.gather(*(pool.call_async(["echo", offset + i], 10) for i in range(40)))

    for offset in (0, 100):  # a trainer may call asyncio.run once per batch
        replies = asyncio.run(batch(offset))
        assert [r.result for r in replies] == [offset + i for i in range(40)]


def test_start_and_close(pool):
    pool.start()
    pids = {pool.call(["pid"], 10).result for _ in range(6)}
    assert len(pids) <= 2
    pool.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(RuntimeError, match="closed"):
        pool.call(["pid"], 10)


def test_each_request_sets_a_cpu_time_backstop(pool):
    import resource

    soft, _ = pool.call(["cpu_limit"], 5).result
    assert soft != resource.RLIM_INFINITY and soft >= 5


def test_a_worker_exits_when_its_stdin_ends():
    proc = subprocess.Popen([sys.executable, "-c", isolation._BOOT, json.dumps(sys.path), TARGET],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert json.loads(proc.stdout.readline()) == {"ready": True}
    proc.stdin.close()  # what the parent's death looks like from the worker
    assert proc.wait(timeout=HANG_BOUND_S) == 0
    proc.stdout.close()
