"""The backends the conformance suite runs against, and how each one's sandboxes start in a test.

Every test of this folder takes the `backend` fixture and runs once per backend: Docker with runc,
Docker with gVisor (`--runtime gvisor`), Podman (rootful, through its Docker API service, started
once per session), bwrap (from the image's root filesystem exported once, no engine reachable), and
the test fake (tests/sandbox/fake.py, registered by one line). A new backend is one more row of
BACKENDS: how to reach it and what this machine can see of it. What it cannot do is not a row's
business: its Capabilities say so, and each case asserts the refusal instead.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from insandbox.sandbox import BACKENDS, Sandbox, SandboxLimits, SandboxSpec, backend_class, register_backend
from tests.conftest import IMAGE
from tests.sandbox.conftest import NO_DOCKER, cache_of


@dataclass(frozen=True)
class Backend:
    id: str  # the test's parameter
    name: str  # the registry's name
    limits: dict = field(default_factory=dict)  # what all its sandboxes here run with (SandboxLimits fields)
    kill_checked: bool = True  # a timed-out command's processes are seen gone from this machine
    init_protected: bool = True  # its first process ignores SIGKILL from inside (a pid namespace's init does)
    engine: bool = True  # needs the Docker engine (the test is marked `docker`)


BACKENDS_UNDER_TEST = (
    Backend("docker", "docker"),
    # its processes live in its own kernel, which lets a sandbox's root kill its first process
    Backend("gvisor", "docker", {"runtime": "gvisor"}, kill_checked=False, init_protected=False),
    Backend("podman", "docker"),
    Backend("bwrap", "bwrap"),
    Backend("fake", "fake", {"memory": None, "cpus": None, "pids": None, "disk": None}, kill_checked=False,
            engine=False),
)


@pytest.fixture(scope="session")
def podman_service(docker_image):
    """Rootful Podman's Docker API service, for the whole session."""
    from tests.sandbox import podman_service as podman

    with podman.rootful_service() as service:
        yield service


class Harness:
    """One backend under test: specs with its settings, started sandboxes that are always closed."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.cls: type[Sandbox] = backend_class(backend.name)
        self.caps = self.cls.capabilities
        self.made: list[Sandbox] = []

    @property
    def id(self) -> str:
        return self.backend.id

    def limits(self, **overrides: Any) -> SandboxLimits:
        return SandboxLimits(**{"network": "none", **self.backend.limits, **overrides})

    def spec(self, limits: dict | None = None, **fields: Any) -> SandboxSpec:
        return SandboxSpec(image=IMAGE, run_id="conformance", limits=self.limits(**(limits or {})), **fields)

    async def make(self, limits: dict | None = None, **fields: Any) -> Sandbox:
        """A started sandbox (closed when the test's body ends)."""
        sb = self.cls(self.spec(limits, **fields))
        self.made.append(sb)
        await sb.start()
        return sb

    async def kill_from_outside(self, sb: Sandbox) -> None:
        """What only this machine can do to a sandbox: the engine's kill, or a signal to its bwrap."""
        if getattr(sb, "container_id", None):
            from insandbox.sandbox.docker import engine

            await asyncio.to_thread(engine.api().kill, sb.container_id)
        else:
            sb.proc.kill()
            await sb.proc.wait()

    def run(self, body: Callable[[], Awaitable[Any]]) -> Any:
        """Run `body()` in an event loop of its own; every sandbox it made is closed afterwards."""
        async def main():
            try:
                return await body()
            finally:
                for sb in self.made:
                    with contextlib.suppress(Exception):
                        await sb.close()
                self.made.clear()
        return asyncio.run(main())


@pytest.fixture(params=[pytest.param(b, id=b.id, marks=[pytest.mark.docker] if b.engine else [])
                        for b in BACKENDS_UNDER_TEST])
def backend(request, monkeypatch, tmp_path) -> Harness:
    b: Backend = request.param
    if b.id in ("docker", "gvisor"):
        request.getfixturevalue("docker_image")
    elif b.id == "podman":
        from tests.sandbox.podman_service import engine_at

        service = request.getfixturevalue("podman_service")
        stack = contextlib.ExitStack()
        stack.enter_context(engine_at(service.host))
        request.addfinalizer(stack.close)
    elif b.id == "bwrap":  # as a Slurm job would: no engine reachable, the image's files from a tar
        tar = request.getfixturevalue("rootfs_tar")
        monkeypatch.setenv("DOCKER_HOST", NO_DOCKER)
        monkeypatch.setenv("INSANDBOX_BWRAP_DIR", str(tmp_path / "sandboxes"))
        monkeypatch.setenv("INSANDBOX_ROOTFS", str(tar))
        monkeypatch.setenv("INSANDBOX_ROOTFS_CACHE", str(cache_of(os.geteuid())))
    elif b.id == "fake":
        monkeypatch.setenv("DOCKER_HOST", NO_DOCKER)
        register_backend("fake", "tests.sandbox.fake:FakeSandbox")  # the one line a new backend needs
        request.addfinalizer(lambda: BACKENDS.pop("fake", None))
    return Harness(b)
