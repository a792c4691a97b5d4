"""The release: `python -m build` makes an sdist and a wheel that carry every package data file, and the
wheel, installed with its dependencies into a fresh virtual environment, runs `insandbox --help` and a
scripted task in a real sandbox from an empty folder, importing itself from that environment.

Needs PyPI (the isolated build fetches setuptools; the fresh environment fetches the dependencies) and the
Docker engine; about a minute on 2 cores with pip's cache warm."""
from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import tomllib

import insandbox
from tests.helpers import REPO

pytestmark = pytest.mark.network

SCRIPT = {"turns": [{"tool": "execute_bash", "args": {"command": "echo 2 3 5 7 > /testbed/output/primes.txt"}},
                    {"tool": "execute_bash", "args": {"command": "echo 17 > /testbed/answer.txt"}},
                    {"tool": "submit"}]}


def package_data_files() -> list[str]:
    """Every file pyproject's package-data patterns name, relative to src/insandbox (each pattern must
    match something: a pattern that matches nothing ships nothing)."""
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["insandbox"]
    root = REPO / "src" / "insandbox"
    files = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
    found = []
    for pattern in patterns:
        hits = [f for f in files if fnmatch.fnmatchcase(f, pattern) and "__pycache__" not in f]
        assert hits, f"package-data pattern {pattern!r} matches no file"
        found += hits
    return sorted(set(found))


def clean_env() -> dict[str, str]:
    """This environment without what would make another interpreter import the checkout's insandbox."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def test_the_built_wheel_installs_into_a_fresh_venv_and_runs_a_task(tmp_path, scripted, docker_image):
    dist = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    version = insandbox.__version__
    (wheel,) = dist.glob(f"insandbox-{version}-py3-none-any.whl")
    (sdist,) = dist.glob(f"insandbox-{version}.tar.gz")

    # every package data file in both (build makes the wheel from the sdist, so the sdist must carry them)
    data = package_data_files()
    assert {"sandbox/docker/image/Dockerfile", "prompts/default.yaml", "models/prices.yaml",
            "viewer/static/viewer.js"} <= set(data)
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    assert not [f for f in data if f"insandbox/{f}" not in in_wheel], "package data missing from the wheel"
    in_sdist = set(tarfile.open(sdist).getnames())
    assert not [f for f in data if f"insandbox-{version}/src/insandbox/{f}" not in in_sdist], \
        "package data missing from the sdist"
    metadata = zipfile.ZipFile(wheel).read(f"insandbox-{version}.dist-info/METADATA").decode()
    assert f"Version: {version}" in metadata and "Classifier: " in metadata
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in in_wheel), "the license text is not in the wheel"

    # a fresh environment: its own site-packages, the wheel and its dependencies from PyPI, nothing of the
    # checkout's environment
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300, env=clean_env())
    installed = subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q", str(wheel)],
                               capture_output=True, text=True, timeout=600, env=clean_env())
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]

    empty = tmp_path / "empty"
    empty.mkdir()

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(args, cwd=empty, capture_output=True, text=True, timeout=timeout, env=clean_env())

    where = run(str(venv / "bin/python"), "-c", "import insandbox; print(insandbox.__file__, insandbox.__version__)")
    assert where.returncode == 0, where.stderr
    path, got_version = where.stdout.split()
    assert Path(path).is_relative_to(venv) and got_version == version, where.stdout

    helped = run(str(venv / "bin/insandbox"), "--help")
    assert helped.returncode == 0 and "run" in helped.stdout, helped.stdout + helped.stderr

    srv = scripted(SCRIPT)
    r = run(str(venv / "bin/insandbox"), "run", "Write the first primes to /testbed/output/primes.txt",
            "--model", "scripted", "--base-url", srv.url, "--image", docker_image, "--max-steps", "5", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads(r.stdout)
    assert summary["exit_reason"] == "submitted" and summary["answer"] == "17\n"
    run_dir = empty / summary["run_dir"]  # relative to the cwd, or absolute (then the join keeps it)
    assert run_dir.resolve().is_relative_to(empty.resolve() / "runs"), run_dir  # the default folder, in the cwd
    assert (run_dir / "files/primes.txt").read_text() == "2 3 5 7\n"
    assert (run_dir / "trajectory.json").is_file()


def test_every_data_file_of_the_package_is_shipped():
    """A file the code reads beside itself (a task's YAML, a template) must be in package-data, or a pip
    install lacks it (bench/harbor/prompts.yaml was missed once)."""
    root = REPO / "src" / "insandbox"
    shipped = set(package_data_files())
    data = [p.relative_to(root).as_posix() for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".py", ".pyc")]
    assert [f for f in data if f not in shipped] == []
