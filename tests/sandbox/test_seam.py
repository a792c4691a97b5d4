"""The sandbox seam: a backend is a Sandbox subclass, its Capabilities and one registering line.
tests/sandbox/fake.py (a folder and bubblewrap, no container engine) plugs in and runs a whole task
through the loop, the tools, copy-back and the answer file, with no Docker engine at all; what it
declares it cannot do is refused in one line (fork, its limits), or done another way (the pool starts
fresh sandboxes). tests/sandbox/conformance/ holds the cases every backend passes."""
from __future__ import annotations

import asyncio

import pytest

from insandbox import arun
from insandbox.core.errors import ConfigError
from insandbox.sandbox import BACKENDS, SandboxLimits, SandboxSpec, SetupError, backend_class, register_backend
from insandbox.sandbox.pool import SandboxPool
from tests.sandbox import fake

# all the fake can have: no limits, no network
UNLIMITED = {"memory": None, "cpus": None, "pids_limit": None, "disk": None, "network": "none"}
LIMITS = SandboxLimits(memory=None, cpus=None, pids=None, disk=None, network="none")


@pytest.fixture
def fake_backend(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")  # no engine: nothing may need one
    register_backend("fake", "tests.sandbox.fake:FakeSandbox")  # the one line a new backend needs
    yield "fake"
    BACKENDS.pop("fake", None)


def test_a_new_backend_runs_a_whole_task(fake_backend, scripted, run_async, tmp_path):
    srv = scripted({"turns": [
        {"tool": "execute_bash", "args": {"command": "echo 42 > answer.txt && mkdir -p output && "
                                                    "echo made > output/report.txt && cat answer.txt"}},
        {"tool": "str_replace_editor", "args": {"command": "create", "path": "/testbed/output/notes.md",
                                                 "file_text": "# notes\n"}},
        {"tool": "submit"}]})
    result = run_async(arun("What is 6 x 7?", model="scripted", base_url=srv.url, output_dir=tmp_path / "run",
                            backend=fake_backend, max_steps=5, **UNLIMITED))
    t = result.trajectory
    assert t.exit_reason == "submitted" and result.answer == "42\n", (t.exit_reason, t.exit_detail)
    assert t.steps[0].tool_calls[0].output.startswith("42\n")
    assert sorted(result.files) == ["notes.md", "report.txt"]
    assert (tmp_path / "run/files/report.txt").read_text() == "made\n"
    assert t.sandbox["backend"] == "fake"


def test_what_a_backend_cannot_do_is_refused_or_done_another_way(fake_backend, run_async):
    from insandbox.agent.env import EnvConfig, SandboxEnv, Task

    async def go():
        env = SandboxEnv(EnvConfig(backend=fake_backend, limits=LIMITS))
        await env.reset(Task(prompt="x"))
        try:
            with pytest.raises(SetupError, match="the fake backend cannot snapshot a sandbox"):
                await env.fork(2)
        finally:
            await env.close()
        async with SandboxPool(SandboxSpec(limits=LIMITS), backend=fake_backend, size=1) as pool:
            first = await pool.acquire()
            pool.release(first)
            await asyncio.sleep(0)
            second = await pool.acquire()
            pool.release(second)
        return first, second, pool.stats

    first, second, stats = run_async(go())
    assert second is not first and stats.recycled == 0 and stats.started >= 2  # no recycling: fresh ones
    assert stats.removed == stats.started
    assert not any(__import__("os").path.exists(root) for root in fake.STARTED)  # every one removed


def test_a_whole_task_asking_for_what_the_backend_cannot_hold_is_refused_before_it_starts(fake_backend, scripted,
                                                                                         run_async, tmp_path):
    srv = scripted({"turns": [{"tool": "submit"}]})
    with pytest.raises(ConfigError) as e:  # a setting the backend cannot have
        run_async(arun("x", model="scripted", base_url=srv.url, output_dir=tmp_path / "run", backend=fake_backend,
                       **{**UNLIMITED, "memory": "1g"}))
    assert str(e.value) == "the fake backend cannot hold a memory limit (--memory 1g); it holds none"
    assert not (tmp_path / "run").exists()


def test_the_registry_takes_only_sandbox_subclasses():
    register_backend("not-one", "tests.sandbox.test_seam:UNLIMITED")
    try:
        with pytest.raises(SetupError, match="^sandbox backend 'not-one' .* is not a subclass of "
                                             "insandbox.sandbox.Sandbox$"):
            backend_class("not-one")
    finally:
        BACKENDS.pop("not-one")


def test_a_pool_whose_spec_the_backend_refuses_says_so_to_the_sample_waiting(fake_backend, run_async):
    """The refusal comes when the pool makes a sandbox: the sample waiting for it gets it, in one line."""
    async def go():
        async with SandboxPool(SandboxSpec(limits=SandboxLimits(network="host")), backend=fake_backend,
                               size=1) as pool:
            with pytest.raises(SetupError, match="^the fake backend cannot hold a memory limit"):
                await asyncio.wait_for(pool.acquire(), 30)
    run_async(go())
