"""The code's shape: tests mirror the package, pure tests need neither Docker nor ../shared,
and only the Docker backend knows about Docker (so a second backend is one file)."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

PACKAGE = REPO / "src" / "insandbox"
# the Docker backend (sandbox/docker/); everything else reaches containers through the Sandbox protocol
DOCKER_FOLDER = "sandbox/docker/"
DOCKER_MODULES = {"sandbox/admission.py"}  # admission: its gate's interface is backend-neutral
DOCKER_IMPORTS = ("docker", "insandbox.sandbox.docker")


def test_tests_are_laid_out_like_the_package():
    folders = {p.name for p in (REPO / "tests").iterdir() if p.is_dir() and p.name not in ("data", "__pycache__")}
    assert folders <= {p.name for p in PACKAGE.iterdir() if p.is_dir()}, folders


def _imports(path: Path) -> list[tuple[str, str]]:
    """(module imported, function it is imported in or "") of a source file, relative imports resolved."""
    tree = ast.parse(path.read_text())
    pkg = ".".join(("insandbox",) + path.relative_to(PACKAGE).parent.parts)
    found = []

    def visit(node, func=""):
        for child in ast.iter_child_nodes(node):
            f = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            if isinstance(child, ast.Import):
                found.extend((a.name, f) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = pkg.rsplit(".", child.level - 1)[0] if child.level > 1 else pkg if child.level else ""
                mod = ".".join(x for x in (base, child.module) if x)
                found.extend((f"{mod}.{a.name}", f) for a in child.names)  # a name may be a submodule
            visit(child, f)
    visit(tree)
    return found


def test_only_the_docker_backend_knows_docker():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(PACKAGE))
        if rel in DOCKER_MODULES or rel.startswith(DOCKER_FOLDER):
            continue
        for mod, func in _imports(path):
            if mod.startswith(DOCKER_IMPORTS) and rel != "cli/image.py":
                offenders.append(f"{rel} ({func or 'module'}) imports {mod}")
    # `insandbox image build|status` are the Docker image's own commands; the registry names backends
    assert offenders == [], offenders


def test_pure_tests_run_without_docker_and_without_the_development_data():
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock", "INSANDBOX_SHARED_DATA": ""}
    # on two workers (pytest-xdist): this repeats some 900 tests, and the suite must stay under 30 minutes
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "-m",
                        "not docker and not shared_data", "--deselect", "tests/test_layout.py", "tests"],
                       cwd=REPO, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:]
    assert " passed" in r.stdout and "failed" not in r.stdout and "error" not in r.stdout.lower()
