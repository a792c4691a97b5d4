"""Fixtures of the bwrap backend's tests: sandboxes started in this process (as root) from the image's
root filesystem as one tar (../conftest.py's rootfs_tar), and an unprivileged user who runs insandbox the
way a Slurm job would.

Every sandbox here runs with DOCKER_HOST pointing at a socket that does not exist: no engine is needed
to run one. The tar and the caches it is unpacked into live under /var/tmp/insandbox-test-rootfs/
(readable by the test user); a new image id replaces them.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from insandbox.sandbox import SandboxLimits, SandboxSpec, create_sandbox
from tests.helpers import REPO
from tests.sandbox.conftest import NO_DOCKER, cache_of

TEST_USER = "insandbox-test"


@pytest.fixture
def no_engine(monkeypatch, rootfs_tar, tmp_path):
    """This process runs bwrap sandboxes from the tar, with no Docker engine reachable; their folders in
    the test's own (so that `clean --all` here sees no sandbox of another run of this user's)."""
    monkeypatch.setenv("DOCKER_HOST", NO_DOCKER)
    monkeypatch.setenv("INSANDBOX_BWRAP_DIR", str(tmp_path / "sandboxes"))
    monkeypatch.setenv("INSANDBOX_ROOTFS", str(rootfs_tar))
    monkeypatch.setenv("INSANDBOX_ROOTFS_CACHE", str(cache_of(os.geteuid())))
    return rootfs_tar


@pytest.fixture
def bwrap_factory(no_engine):
    """Started bwrap sandboxes in a test's own event loop (network none unless said); closed afterwards."""
    made = []

    async def make(**spec):
        limits = spec.pop("limits", None) or SandboxLimits(network="none")
        sb = create_sandbox(SandboxSpec(run_id="test", limits=limits, **spec), "bwrap")
        await sb.start()
        made.append(sb)
        return sb

    yield make
    from insandbox.sandbox.bwrap import LIVE

    for sb in made:
        if sb.name in LIVE:  # a test that failed half way: kill it and remove its folder
            type(sb).kill_all_now()


@pytest.fixture(scope="session")
def test_user() -> pwd.struct_passwd:
    """An unprivileged user of this machine (made once, as root)."""
    try:
        return pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(["useradd", "-m", "-s", "/bin/bash", TEST_USER], check=True)
        return pwd.getpwnam(TEST_USER)


def _python_for(user: str) -> tuple[str, str]:
    """(an interpreter the user may run, PYTHONPATH with this checkout and this interpreter's packages): this
    one where the user can run it, else the system's Python of the same version with this venv's packages."""
    if subprocess.run(["runuser", "-u", user, "--", sys.executable, "-c", "pass"], capture_output=True).returncode == 0:
        return sys.executable, str(REPO / "src")
    site = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    assert Path(system).is_file(), f"no Python {sys.version_info[:2]} the user {user} can run"
    return system, f"{REPO / 'src'}:{site}"


@pytest.fixture(scope="session")
def as_user(test_user, rootfs_tar):
    """as_user(code, env=None, timeout=300) -> CompletedProcess: `code` run by the unprivileged user with
    no Docker engine, from a clean environment (as a Slurm job's would be), the root filesystem from the
    tar (unpacked once into the user's cache). run_json(...) takes the last line printed as JSON."""
    python, path = _python_for(test_user.pw_name)
    cache = cache_of(test_user.pw_uid)
    cache.mkdir(exist_ok=True)
    os.chown(cache, test_user.pw_uid, test_user.pw_gid)

    def argv(code: str, args: tuple = (), env: dict | None = None) -> list[str]:
        base = {"HOME": test_user.pw_dir, "USER": test_user.pw_name, "PATH": "/usr/local/bin:/usr/bin:/bin",
                "LANG": "C.UTF-8", "PYTHONPATH": path, "DOCKER_HOST": NO_DOCKER, "INSANDBOX_ROOTFS": str(rootfs_tar),
                "INSANDBOX_ROOTFS_CACHE": str(cache_of(test_user.pw_uid)), "PYTHONDONTWRITEBYTECODE": "1"}
        return ["runuser", "-u", test_user.pw_name, "--", "env", "-i",
                *(f"{k}={v}" for k, v in {**base, **(env or {})}.items()), python, "-c", code, *args]

    def run(code: str, env: dict | None = None, timeout: float = 300, args: tuple = ()) -> subprocess.CompletedProcess:
        return subprocess.run(argv(code, args, env), capture_output=True, text=True, timeout=timeout, cwd="/tmp")

    def run_json(code: str, **kw) -> dict:
        r = run(code, **kw)
        assert r.returncode == 0 and r.stdout.strip(), f"rc={r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        return json.loads(r.stdout.strip().splitlines()[-1])

    run.json = run_json
    run.argv = argv
    run.user = test_user
    return run


@pytest.fixture
def user_tmp(test_user):
    """A folder of the unprivileged user's own (pytest's tmp_path is root's, closed to others)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="insandbox-test-", dir="/tmp"))
    os.chown(path, test_user.pw_uid, test_user.pw_gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)
