"""Shared fixtures. Tests use a real Docker engine and real HTTP to the scripted model
server; a missing engine is an error, never a skip (scripts/setup.sh starts one)."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from insandbox.models.scripted_server import ScriptedServer
from insandbox.sandbox import SandboxSpec, create_sandbox

IMAGE = os.environ.get("INSANDBOX_TEST_IMAGE", "insandbox:latest")
REPO = Path(__file__).resolve().parents[1]


def _shared_data() -> Path:
    """The development data sets (../shared/data beside the checkout); never shipped with the product."""
    for cand in (os.environ.get("INSANDBOX_SHARED_DATA"), REPO.parent / "shared" / "data", Path("/work/shared/data")):
        if cand and (Path(cand) / "bench").is_dir():
            return Path(cand)
    raise RuntimeError("development data not found: set INSANDBOX_SHARED_DATA to the shared/data folder")


SHARED_DATA = _shared_data()
# IFBench's checks tokenize with NLTK; offline, point NLTK at the copies of its data in shared/
os.environ.setdefault("NLTK_DATA", str(SHARED_DATA / "nltk_data"))


@pytest.fixture(scope="session")
def docker_image() -> str:
    """The sandbox image, built if missing (scripts/setup.sh normally did it already)."""
    from insandbox.sandbox import engine, image

    engine.api().ping()
    if not image.image_exists(IMAGE):
        image.build_image(IMAGE)
    return IMAGE


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
        made.append(sb.container_id)
        return sb

    yield make
    from insandbox.sandbox import engine

    for cid in made:  # a test that failed half way must not leave containers behind
        try:
            engine.api().remove_container(cid, force=True)
        except Exception:
            pass


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


def cli(*args: str, env: dict | None = None, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    """Run the installed `insandbox` command."""
    exe = Path(sys.executable).parent / "insandbox"
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, env=full_env, **kw)


def containers_with_label(label: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={label}"], capture_output=True, text=True)
    return out.stdout.split()
