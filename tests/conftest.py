"""Shared fixtures. Tests use a real Docker engine and real HTTP to the scripted model
server; a missing engine is an error, never a skip (scripts/setup.sh starts one). Only the
fixtures touch Docker: pure-function tests run without an engine and without ../shared."""
from __future__ import annotations

import asyncio
import os

import pytest

from insandbox.models.scripted_server import ScriptedServer
from insandbox.sandbox import SandboxSpec, create_sandbox
from tests.servers import llama_cpp_python_server, llama_server  # noqa: F401  (fixtures)

IMAGE = os.environ.get("INSANDBOX_TEST_IMAGE", "insandbox:latest")
DOCKER_FIXTURES = {"docker_image", "sandbox_factory"}
SERVER_FIXTURES = {"llama_server", "llama_cpp_python_server"}


def pytest_collection_modifyitems(items):
    """Tests that use the engine through a fixture are marked `docker`: `-m "not docker and not
    shared_data"` then selects the tests that need neither (tests/test_layout.py proves they do).
    Tests that start real third-party model servers (tests/servers.py) are marked `third_party_server`."""
    for item in items:
        if DOCKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.docker)
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.third_party_server)


@pytest.fixture(scope="session")
def docker_image() -> str:
    """The sandbox image, built if missing (scripts/setup.sh normally did it already)."""
    from insandbox.sandbox.docker import engine, image

    engine.api().ping()
    if not image.image_exists(IMAGE):
        image.build_image(IMAGE)
    return IMAGE


def _own_containers() -> set[str]:
    from insandbox.sandbox.docker import LABEL_OWNER, engine, owner_label

    api = engine.api()
    return {n for c in api.containers(all=True, filters={"label": f"{LABEL_OWNER}={owner_label()}"})
            for n in c.get("Names") or [c["Id"]]}


@pytest.fixture(autouse=True)
def _no_container_left(request):
    """A Docker test that leaves a container of this process behind is named in a warning (the soak
    test, later in the run, counts this process's containers and would fail without saying whose)."""
    if request.node.get_closest_marker("docker") is None or os.environ.get("DOCKER_HOST"):
        yield
        return
    try:
        before = _own_containers()
    except Exception:  # no engine now (a test that restarts it): nothing to compare
        yield
        return
    yield
    try:
        left = _own_containers() - before
    except Exception:
        return
    if left:
        import warnings

        warnings.warn(f"{request.node.nodeid} left containers behind: {sorted(left)}", stacklevel=1)


@pytest.fixture
def run_async():
    """Run a coroutine to completion (tests stay plain functions)."""
    def runner(coro):
        return asyncio.run(coro)
    return runner


@pytest.fixture
def sandbox_factory(docker_image):
    """Make started sandboxes inside a test's own event loop; they are removed afterwards."""
    made = []

    async def make(**spec):
        sb = create_sandbox(SandboxSpec(image=docker_image, run_id="test", **spec))
        await sb.start()
        made.append(sb)
        return sb

    yield make
    from insandbox.sandbox.docker import engine, etc_files

    for sb in made:  # a test that failed half way must not leave containers (or their /etc files) behind
        try:
            engine.api().remove_container(sb.container_id, force=True)
        except Exception:
            pass
        etc_files.remove(sb.name)


@pytest.fixture
def scripted():
    """Start scripted model servers: scripted(script) -> ScriptedServer (stopped afterwards)."""
    servers = []

    def start(script, **kw):
        srv = ScriptedServer(script, **kw).start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.stop()
