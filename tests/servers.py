"""Real third-party model servers for tests: llama.cpp's own `llama-server` and llama-cpp-python's
FastAPI server, each started on a free loopback port with the embedded model's GGUF (SmolLM2-135M)
and stopped at the end of the session. Fixtures (registered in tests/conftest.py):

- `llama_server`: llama-server with `--jinja` (the binary scripts/build_llama_server.sh builds);
- `llama_cpp_python_server`: `python -m llama_cpp.server`, parametrized by chat format:
  `chatml-function-calling` (tool calls) and `chatml` (none). A test that wants one of them says
  `@pytest.mark.parametrize("llama_cpp_python_server", ["chatml"], indirect=True)`.

Each yields a `RunningServer` (`.base_url` ends in /v1). A missing binary, model or package is a
failure that says how to get it, never a skip: these tests are how we know those servers work.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Optional

import pytest

DEFAULT_LLAMA_VERSION = "0.3.36"  # scripts/setup.sh's INSANDBOX_LLAMA_VERSION
MODEL_ALIAS = "smollm2-135m-instruct"
N_CTX = 8192
SEED = 42
START_TIMEOUT_S = 180.0  # a model load is ~1 s here, but the suite shares two cores with sandboxes
LLAMA_CPP_PYTHON_FORMATS = ["chatml-function-calling", "chatml"]
# the packages of llama-cpp-python's `server` extra that insandbox's own extras do not already bring
SERVER_EXTRA_MODULES = ["fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings"]


def threads() -> int:
    """Half the cores (at most 4): ggml's worker threads spin while they wait, so a server that
    takes every core of a machine also running sandboxes and pytest is several times slower."""
    return max(1, min(4, (os.cpu_count() or 2) // 2))


@dataclass
class RunningServer:
    kind: str  # "llama-server" or "llama-cpp-python (FORMAT)"
    root_url: str  # http://127.0.0.1:PORT
    model: str  # the id the server lists at /v1/models
    proc: subprocess.Popen
    log: Path  # its stdout and stderr
    supports_messages: bool = False  # answers Anthropic's Messages API at /v1/messages
    started_s: float = 0.0  # spawn to ready

    @property
    def base_url(self) -> str:
        return self.root_url + "/v1"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def llama_version() -> str:
    """The llama-cpp-python version whose llama.cpp the binary was built from: the installed one,
    so llama-server and the embedded model run the same llama.cpp."""
    if os.environ.get("INSANDBOX_LLAMA_VERSION"):
        return os.environ["INSANDBOX_LLAMA_VERSION"]
    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:
        return DEFAULT_LLAMA_VERSION


def llama_server_binary() -> Path:
    """INSANDBOX_LLAMA_SERVER (any llama-server build), else the one build_llama_server.sh cached."""
    if os.environ.get("INSANDBOX_LLAMA_SERVER"):
        path = Path(os.environ["INSANDBOX_LLAMA_SERVER"])
    else:
        cache = Path(os.environ.get("INSANDBOX_BIN_CACHE") or Path.home() / ".cache/insandbox/bin")
        path = cache / f"llama-server-{llama_version()}"
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"llama.cpp's llama-server is not built ({path} is missing): run "
                    f"`bash scripts/build_llama_server.sh` once (a few minutes; scripts/setup.sh does it too), "
                    f"or set INSANDBOX_LLAMA_SERVER to a llama-server binary", pytrace=False)
    return path


def gguf() -> Path:
    from insandbox.models.local_server import LocalModelMissing, default_gguf

    try:
        return default_gguf()
    except LocalModelMissing as e:
        pytest.fail(str(e), pytrace=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child: SIGTERM when the test process dies, even by SIGKILL (Linux prctl), so no
    server outlives an interrupted session."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def http(method: str, url: str, body: Optional[dict] = None, timeout: float = 60.0) -> tuple[int, dict]:
    """One JSON request: (status, JSON body or {}); status 0 when nothing answered."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    except (urllib.error.URLError, OSError):
        return 0, {}
    try:
        return status, json.loads(raw or b"{}")
    except ValueError:
        return status, {}


def start(kind: str, argv_for_port, ready_path: str, log_dir: Path, env: Optional[dict] = None) -> RunningServer:
    """Spawn the server on a free port and wait until `ready_path` answers 200. The port is picked
    before the server binds it, so another process may take it first: then try a new one."""
    for attempt in range(3):
        port = free_port()
        log = log_dir / f"{kind.split()[0]}-{port}.log"
        t0 = time.perf_counter()
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv_for_port(port), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, **(env or {})}, preexec_fn=_die_with_parent)
        server = RunningServer(kind, f"http://127.0.0.1:{port}", "", proc, log)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            # llama-server answers 503 while the model loads, 200 once it is ready
            if http("GET", server.root_url + ready_path, timeout=5)[0] == 200:
                server.started_s = time.perf_counter() - t0
                break
            time.sleep(0.05)
        if server.started_s:
            return server
        stop(server)
        if re.search(r"in use|bind", server.log_tail()) and attempt < 2:  # lost the port race
            continue
        pytest.fail(f"{kind} did not start within {START_TIMEOUT_S:g} s (exit code {proc.returncode}); "
                    f"its log ({log}):\n{server.log_tail()}", pytrace=False)
    raise AssertionError("unreachable")


def stop(server: RunningServer) -> None:
    if server.proc.poll() is None:
        server.proc.terminate()
        try:
            server.proc.wait(10)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait(10)


def probe(server: RunningServer) -> RunningServer:
    """Fill in what the server says of itself: its model id, and whether /v1/messages works."""
    status, listing = http("GET", server.base_url + "/models")
    assert status == 200 and listing.get("data"), f"{server.kind}: /v1/models answered {status} {listing}"
    server.model = listing["data"][0]["id"]
    status, reply = http("POST", server.base_url + "/messages",
                         {"model": server.model, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
    server.supports_messages = status == 200 and reply.get("type") == "message"
    return server


def start_llama_server(log_dir: Path) -> RunningServer:
    """llama.cpp's llama-server: SmolLM2 with --jinja (its own chat template, which has no tools)."""
    binary, model = llama_server_binary(), gguf()

    def argv(port: int) -> list[str]:
        return [str(binary), "-m", str(model), "--jinja", "-c", str(N_CTX), "-np", "1", "--seed", str(SEED),
                "-t", str(threads()), "-a", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(port), "--no-webui"]

    return probe(start("llama-server", argv, "/health", log_dir))


def start_llama_cpp_python(log_dir: Path, chat_format: str) -> RunningServer:
    """llama-cpp-python's own server (`python -m llama_cpp.server`) with this chat format."""
    import importlib.util

    missing = [m for m in ["llama_cpp", *SERVER_EXTRA_MODULES] if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"llama-cpp-python's server needs {', '.join(missing)}: pip install -e '.[dev,local]' "
                    f"(scripts/setup.sh does)", pytrace=False)
    model = gguf()

    def argv(port: int) -> list[str]:
        return [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--chat_format", chat_format,
                "--n_ctx", str(N_CTX), "--seed", str(SEED), "--n_threads", str(threads()),
                "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(port), "--verbose", "False"]

    return probe(start(f"llama-cpp-python ({chat_format})", argv, "/v1/models", log_dir,
                       env={"PYTHONUNBUFFERED": "1"}))


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """llama.cpp's llama-server: SmolLM2 with --jinja (its own chat template, which has no tools)."""
    server = start_llama_server(tmp_path_factory.mktemp("llama-server"))
    yield server
    stop(server)


@pytest.fixture(scope="session", params=LLAMA_CPP_PYTHON_FORMATS)
def llama_cpp_python_server(request, tmp_path_factory):
    """llama-cpp-python's own server with the chat format given as the fixture's param; both by default."""
    server = start_llama_cpp_python(tmp_path_factory.mktemp("llama-cpp-python"), request.param)
    yield server
    stop(server)
