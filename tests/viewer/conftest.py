"""Fixtures of the viewer's tests: folders recorded by real runs, the viewer served on a free port, and
headless Chromium (Debian's package, driven by Playwright)."""
from __future__ import annotations

import glob
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import pytest

from insandbox.bench.report_files import write_report
from insandbox.viewer.app import bind, server
from tests.viewer.recorded import record_bench, record_run


def chromium_path() -> Optional[str]:
    """Debian's chromium (Playwright cannot download its own browsers here); INSANDBOX_CHROMIUM overrides.
    None: Playwright's own build (setup.sh installs it on Ubuntu, whose chromium package is a snap stub)."""
    for cand in (os.environ.get("INSANDBOX_CHROMIUM"), "/usr/lib/chromium/chromium", shutil.which("chromium")):
        if cand and os.path.exists(cand):
            return cand
    if glob.glob(os.path.expanduser("~/.cache/ms-playwright/chromium*")):
        return None
    raise RuntimeError("no chromium: install it (scripts/setup.sh does: apt-get install chromium) "
                       "or set INSANDBOX_CHROMIUM")


class Served:
    """The viewer over `root` in a thread of this process; `url(path)` is an address on it. `listen` is the
    address it binds, `host` the --host it is told it was started with (by default `listen`)."""

    def __init__(self, root: Path, listen: str = "127.0.0.1", host: Optional[str] = None):
        sock = bind(listen, 0)
        self.port = sock.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.server = server(root, sock, host=host)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.time() + 10
        while not self.server.started and time.time() < deadline:
            time.sleep(0.02)
        assert self.server.started, "the viewer did not start"

    def url(self, path: str = "/") -> str:
        return self.base + path

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def serve(root: Path, listen: str = "127.0.0.1", host: Optional[str] = None) -> Served:
    return Served(root, listen, host)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, docker_image) -> Path:
    """runs/plot (a run that drew a PNG, wrote an HTML page and a CSV) and runs/bench-chem (two items, both
    modes), recorded once per module by real runs against the scripted model."""
    root = tmp_path_factory.mktemp("viewer") / "runs"
    record_run(root / "plot", docker_image)
    record_bench(root / "bench-chem", docker_image)
    (root / "bench-chem-rows.jsonl").unlink()
    write_report([root / "bench-chem"])  # report/: figures and report.html, shown on the benchmark's page
    return root


@pytest.fixture(scope="module")
def browser() -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path())
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.errors = errors
    yield pg
    context.close()
