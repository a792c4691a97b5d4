"""Admission control on the real engine: starts beyond what fits queue and all finish, a closed
sandbox gives its room back, a start the engine refuses for want of room waits and is tried
again, and the host figures the gate reads are the kernel's."""
from __future__ import annotations

import asyncio
import dataclasses
import errno
import subprocess
import uuid

import pytest

from insandbox.sandbox import SandboxError, SandboxLimits, SandboxSpec, admission, create_sandbox
from insandbox.sandbox.admission import Gate, Thresholds
from insandbox.sandbox.docker import engine
from insandbox.sandbox.docker.host import EngineHost
from tests.helpers import containers_with_label

QUICK = SandboxLimits(disk=None, memory="256m", cpus=1.0)  # admission does not depend on the disk limit


@pytest.fixture
def fresh_gate(monkeypatch, docker_image):
    """A gate of the test's own as the process's gate, with its status lines collected; the
    test's containers (run id "admission-<uuid>") are removed afterwards whatever happened."""
    run_id = f"admission-{uuid.uuid4().hex[:8]}"
    lines: list[str] = []

    def make(**thresholds) -> Gate:
        gate = Gate(Thresholds(poll_s=0.1, **thresholds), enabled=True)
        gate.report_to(lines.append)
        monkeypatch.setattr(admission, "_gate", gate)
        return gate

    make.lines, make.run_id, make.image = lines, run_id, docker_image
    yield make
    for cid in containers_with_label(f"insandbox.run_id={run_id}"):
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)


@pytest.fixture
def one_address_network(fresh_gate):
    """A Docker network with room for one container: the engine refuses a second one ("no available
    IPv4 addresses"), as it refuses starts when a bridge, the memory or the open files run out."""
    name = f"insandbox-test-{uuid.uuid4().hex[:8]}"
    for _ in range(20):  # a free /30 among 10.253.0.0/16
        subnet = f"10.253.{uuid.uuid4().int % 256}.{4 * (uuid.uuid4().int % 64)}/30"
        made = subprocess.run(["docker", "network", "create", "--subnet", subnet, name], capture_output=True)
        if made.returncode == 0:
            break
    else:
        raise AssertionError("could not create a test network")
    yield name
    for cid in containers_with_label(f"insandbox.run_id={fresh_gate.run_id}"):
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
    subprocess.run(["docker", "network", "rm", name], capture_output=True)


def sandbox(fresh_gate, **limits):
    spec_limits = dataclasses.replace(QUICK, **limits)  # the sizes in bytes are worked out again
    return create_sandbox(SandboxSpec(image=fresh_gate.image, run_id=fresh_gate.run_id, limits=spec_limits))


async def until(predicate, what: str, timeout: float = 60.0) -> None:
    """Wait for a state (not a time): fail with `what` if it never comes."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        if loop.time() > end:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.05)


def test_four_asked_two_fit_the_others_queue_and_all_finish(fresh_gate, run_async):
    gate = fresh_gate(max_sandboxes=2)
    live, most, order = set(), [0], []

    async def one(i: int) -> str:
        sb = sandbox(fresh_gate)
        await sb.start()
        live.add(i)
        most[0] = max(most[0], len(live))
        order.append(i)
        try:
            out = (await sb.run(f"echo sandbox-{i}")).output.strip()
            await asyncio.sleep(0.3)  # overlap with the others still queued
            return out
        finally:
            live.discard(i)
            await sb.close()

    async def all_four() -> list[str]:
        return await asyncio.gather(*(one(i) for i in range(4)))

    outputs = run_async(all_four())
    assert outputs == [f"sandbox-{i}" for i in range(4)]
    assert most[0] == 2  # never more than fit, and the two that fit ran side by side
    assert sorted(order[2:]) == [2, 3]  # first come, first served
    assert gate.waits == 2 and gate.live == 0 and gate.starting == 0
    assert any(line.startswith("waiting for a sandbox to close: 2 live, --max-sandboxes 2") for line in
               fresh_gate.lines)
    assert not containers_with_label(f"insandbox.run_id={fresh_gate.run_id}")


def test_close_gives_the_room_back(fresh_gate, run_async):
    gate = fresh_gate(max_sandboxes=1)

    async def scenario() -> None:
        first = sandbox(fresh_gate)
        await first.start()
        assert gate.live == 1
        second = sandbox(fresh_gate)
        waiting = asyncio.ensure_future(second.start())
        await until(lambda: any(line.startswith("waiting for a sandbox to close") for line in fresh_gate.lines),
                    "the second start says it waits")
        await asyncio.sleep(0.5)
        assert not waiting.done() and second.container_id is None  # no container while it waits
        await first.close()
        await asyncio.wait_for(waiting, 120)
        assert gate.live == 1 and gate.waits == 1
        assert (await second.run("echo second")).output.strip() == "second"
        await second.close()
        await second.close()  # a second close gives nothing back twice
        assert gate.live == 0

    run_async(scenario())


def test_a_start_waits_for_memory_and_goes_on_when_there_is_room(fresh_gate, run_async):
    total = admission.meminfo()["MemTotal"]
    gate = fresh_gate(memory_reserve=total)  # nothing fits

    async def scenario() -> None:
        sb = sandbox(fresh_gate)
        starting = asyncio.ensure_future(sb.start())
        await until(lambda: any(line.startswith("waiting for memory:") for line in fresh_gate.lines),
                    "the start says it waits for memory")
        assert not starting.done()
        gate.configure(memory_reserve=0)
        await asyncio.wait_for(starting, 120)
        assert (await sb.run("echo in")).output.strip() == "in"
        await sb.close()

    run_async(scenario())
    assert any(line.startswith("room again") for line in fresh_gate.lines)


def test_a_start_refused_for_want_of_room_is_retried(fresh_gate, one_address_network, run_async):
    gate, net = fresh_gate(), one_address_network

    async def scenario() -> None:
        first = sandbox(fresh_gate, network=net)
        await first.start()
        second = sandbox(fresh_gate, network=net)
        starting = asyncio.ensure_future(second.start())
        await until(lambda: gate.retries >= 1, "the refused start is retried")
        await until(lambda: gate.refused_at == 1 and len(gate._queue) == 1, "the retry waits for room")
        assert not starting.done()
        await first.close()
        await asyncio.wait_for(starting, 120)
        assert (await second.run("echo second")).output.strip() == "second"
        await second.close()

    run_async(scenario())
    assert any("refused for want of room" in line and "no available IPv4" in line for line in fresh_gate.lines)
    assert gate.live == 0
    assert not containers_with_label(f"insandbox.run_id={fresh_gate.run_id}")  # the refused attempt's is gone too


def test_a_start_that_keeps_being_refused_fails_in_the_end(fresh_gate, one_address_network, run_async):
    gate, net = fresh_gate(retry_for_s=0.0), one_address_network  # no retry at all

    async def scenario() -> None:
        first = sandbox(fresh_gate, network=net)
        await first.start()
        try:
            with pytest.raises(SandboxError, match="no available IPv4"):
                await sandbox(fresh_gate, network=net).start()
        finally:
            await first.close()

    run_async(scenario())
    assert gate.live == 0 and gate.retries == 0


def test_what_counts_as_a_refusal_for_want_of_room():
    assert admission.is_resource_refusal(OSError(errno.EMFILE, "Too many open files"))
    assert admission.is_resource_refusal(SandboxError("could not start the sandbox container: failed to create "
                                                      "endpoint x: adding interface veth1 to bridge docker0 "
                                                      "failed: exchange full"))
    wrapped = SandboxError("could not give the sandbox its 10g disk")
    wrapped.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    assert admission.is_resource_refusal(wrapped)
    assert not admission.is_resource_refusal(SandboxError("image 'nope' not found"))
    assert not admission.is_resource_refusal(ValueError("bad setting"))


def test_thresholds_from_the_environment(monkeypatch):
    monkeypatch.setenv("INSANDBOX_MAX_SANDBOXES", "300")
    monkeypatch.setenv("INSANDBOX_ADMIT_MEMORY_RESERVE", "2g")
    monkeypatch.setenv("INSANDBOX_ADMIT_POLL_S", "0.25")
    t = Thresholds.from_environment()
    assert (t.max_sandboxes, t.memory_reserve, t.poll_s) == (300, 2 << 30, 0.25)
    monkeypatch.setenv("INSANDBOX_ADMIT_TASKS_PER_SANDBOX", "lots")
    with pytest.raises(ValueError, match="INSANDBOX_ADMIT_TASKS_PER_SANDBOX"):
        Thresholds.from_environment()


def test_host_figures_are_the_kernels(docker_image):
    assert admission.host_tasks() > 0
    assert admission.meminfo()["MemAvailable"] <= admission.meminfo()["MemTotal"]
    soft, hard = admission.raise_file_limit()
    import resource
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == soft == hard
    engine.api()  # the engine on this machine: its bridge is found
    bridge = asyncio.run(EngineHost().bridge_of("bridge"))
    assert bridge is not None and bridge.startswith(("docker", "br-"))
    assert asyncio.run(EngineHost().bridge_of("none")) is None


def test_sandboxes_are_admitted_at_their_process_limits(fresh_gate, run_async):
    """Every live sandbox counts at its --pids-limit (fork-bombing together they must still leave the
    host pids): with room for two at 5,000 tasks, a third waits until one closes."""
    room = admission.task_limit() - admission.host_tasks()
    gate = fresh_gate(tasks_reserve=room - 12_500)  # 12,500 tasks left: two sandboxes of 5,000, not three

    async def scenario() -> None:
        first, second, third = (sandbox(fresh_gate, pids=5000) for _ in range(3))
        await first.start()
        await second.start()
        assert gate.committed_tasks == 10_000
        waiting = asyncio.ensure_future(third.start())
        await until(lambda: any(line.startswith("waiting for tasks: 2 live sandbox(es) may hold 10,000 tasks")
                                for line in fresh_gate.lines), "the third start says it waits for tasks")
        assert not waiting.done() and third.container_id is None
        await first.close()
        await asyncio.wait_for(waiting, 120)
        assert gate.committed_tasks == 10_000
        for sb in (second, third):
            await sb.close()
        assert gate.committed_tasks == 0

    run_async(scenario())


def test_a_sandbox_bigger_than_the_host_is_refused_in_one_line(fresh_gate, run_async):
    fresh_gate()
    too_many = admission.task_limit() + 1

    async def scenario() -> None:
        sb = sandbox(fresh_gate, pids=too_many)
        with pytest.raises(admission.TasksRefused, match="lower --pids-limit or raise kernel.pid_max"):
            await sb.start()
        assert sb.container_id is None

    run_async(scenario())


def test_under_gvisor_the_host_limit_is_twelve_tasks_a_process():
    from insandbox.sandbox.docker import limits

    assert limits.host_pids(SandboxLimits(pids=100), gvisor=True) == 1200
    assert limits.host_pids(SandboxLimits(pids=100), gvisor=False) == 100
    assert limits.host_pids(SandboxLimits(pids=None), gvisor=True) is None
