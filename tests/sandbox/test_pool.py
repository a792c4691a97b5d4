"""The sandbox pool (sandbox/pool.py) with real containers: reuse through recycling, removal
when recycling is off or used up, dead sandboxes never handed out, everything removed at close."""
from __future__ import annotations

import asyncio

from insandbox.sandbox import SandboxSpec
from insandbox.sandbox.docker import engine
from insandbox.sandbox.pool import SandboxPool
from tests.helpers import containers_with_label


def pool_of(docker_image: str, run_id: str, **kw) -> SandboxPool:
    return SandboxPool(SandboxSpec(image=docker_image, run_id=run_id), **kw)


def test_a_released_sandbox_comes_back_recycled(docker_image, run_async):
    async def go():
        async with pool_of(docker_image, "pool-reuse", size=1) as pool:
            sb = await pool.acquire()
            await sb.run("echo left > /testbed/left.txt; export LEFT=1; cd /tmp")
            pool.release(sb)
            again = await pool.acquire()
            assert again is sb and again.uses == 2
            res = await again.run('ls /testbed; echo "${LEFT:-unset}"; pwd')
            assert res.output.split() == ["input", "output", "unset", "/testbed"]
            pool.release(again)
            third = await pool.acquire()
            assert third is sb and third.uses == 3 and pool.stats.started == 1 and pool.stats.recycled == 2
            pool.release(third)

    run_async(go())
    assert containers_with_label("insandbox.run_id=pool-reuse") == []


def test_without_recycling_each_sample_gets_a_new_container(docker_image, run_async):
    async def go():
        async with pool_of(docker_image, "pool-fresh", size=2, recycle=False) as pool:
            first = await pool.acquire()
            pool.release(first)
            second = await pool.acquire()
            assert second is not first and second.uses == 1
            pool.release(second)
            await asyncio.sleep(0)  # let the remover run
        assert pool.stats.recycled == 0 and pool.stats.removed >= 2

    run_async(go())
    assert containers_with_label("insandbox.run_id=pool-fresh") == []


def test_used_up_and_dead_sandboxes_are_replaced(docker_image, run_async):
    async def go():
        async with pool_of(docker_image, "pool-replace", size=1, max_uses=2) as pool:
            sb = await pool.acquire()
            pool.release(sb)
            sb = await pool.acquire()
            assert sb.uses == 2
            pool.release(sb)  # served max_uses samples: removed, a fresh one started
            fresh = await pool.acquire()
            assert fresh is not sb and fresh.uses == 1
            pool.release(fresh)
            while fresh not in pool._warm:  # recycled and waiting
                await asyncio.sleep(0.02)
            engine.api().kill(fresh.container_id)  # it dies while waiting
            for _ in range(50):
                if not fresh.alive:
                    break
                await asyncio.sleep(0.1)
            other = await pool.acquire()
            assert other is not fresh and other.alive
            assert (await other.run("echo ok")).output.strip() == "ok"
            pool.release(other)

    run_async(go())
    assert containers_with_label("insandbox.run_id=pool-replace") == []


def test_more_samples_than_sandboxes_wait_their_turn(docker_image, run_async):
    """size bounds the sandboxes alive: the samples beyond it wait for a recycled one."""
    async def go():
        async with pool_of(docker_image, "pool-queue", size=2) as pool:
            pool.expect(6)

            async def sample(i: int) -> str:
                sb = await pool.acquire()
                try:
                    res = await sb.run(f"ls /testbed | tr '\\n' ' '; echo {i} > /testbed/mine")
                    return res.output
                finally:
                    pool.release(sb)

            outputs = await asyncio.gather(*(sample(i) for i in range(6)))
            assert all(out.split() == ["input", "output"] for out in outputs), outputs  # nobody saw another's
            assert pool.stats.started <= 2 and pool.stats.started + pool.stats.recycled >= 6  # never more than size

    run_async(go())
    assert containers_with_label("insandbox.run_id=pool-queue") == []
