"""Scoring in worker processes that a timeout can kill, usable from any thread or event loop.

Why processes: some answers make math-verify compute for minutes in C code that holds the GIL
(e.g. comparing 42 with "9^{9^{9}}"). A thread with a timeout can neither stop that nor let the
event loop run meanwhile (measured: asyncio.wait_for(..., 2) on such a thread had not returned
after 120 s), and math-verify's SIGALRM timeouts only work in the main thread. A process can be
killed, whatever it is doing.

Design:
- each worker is `python -c ...` (not multiprocessing: no fork of a trainer holding CUDA and
  threads, no re-import of the trainer's __main__), with the parent's sys.path, serving one
  request at a time as JSON lines on its stdin/stdout (anything else it prints goes to stderr);
- a request gets `timeout_s` of wall time from when it is sent; past that the worker is killed
  and replaced on next use; a worker crash is an error reply, never an exception;
- blocking waits happen on the pool's own threads, so the event loop never blocks and the pool
  works across event loops (asyncio.run per batch) and from plain threads;
- workers start lazily, up to `size` (start-up is not counted in a request's time), and exit when
  the parent goes away (end of stdin); one that keeps computing after its parent died is stopped
  by a CPU-time limit (RLIMIT_CPU) as a backstop.
"""
from __future__ import annotations

import asyncio
import importlib
import json
import os
import selectors
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

from ...core.errors import InternalSignal

_BOOT = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
         "from insandbox.rl.rewards.isolation import serve; serve(sys.argv[2])")
_ORPHAN_CPU_MARGIN_S = 30  # CPU seconds past its timeout that a worker whose parent is gone may use


class WorkerFailure(InternalSignal):
    """No reply from a worker: timed out, died, or could not start."""


@dataclass
class Reply:
    result: Any = None
    error: Optional[str] = None  # the request raised in the worker, timed out, or the worker died
    seconds: float = 0.0  # wall time from taking a worker to its reply


class _Worker:
    def __init__(self, target: str, startup_timeout_s: float):
        if not sys.executable:
            raise WorkerFailure("no Python executable to start a scoring worker with")
        self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, json.dumps(sys.path), target],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
                                     close_fds=True, start_new_session=True)  # Ctrl-C is the parent's
        self._buffer = b""
        self._selector = selectors.DefaultSelector()  # not select(): trainers may hold > 1024 fds
        self._selector.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            hello = self._receive(startup_timeout_s, "starting")
        except WorkerFailure:
            self.kill()
            raise
        if not hello.get("ready"):
            self.kill()
            raise WorkerFailure(f"scoring worker failed to start: {hello.get('error')}")

    def call(self, request: bytes, timeout_s: float) -> dict:
        self._send(request)
        return self._receive(timeout_s, "scoring")

    def _send(self, request: bytes) -> None:
        data = memoryview(request)
        try:
            while data:
                data = data[os.write(self.proc.stdin.fileno(), data):]
        except OSError as e:
            raise WorkerFailure(f"scoring worker is gone ({type(e).__name__}; exit code {self.proc.poll()})") from None

    def _receive(self, allowed_s: float, doing: str) -> dict:
        deadline = time.monotonic() + allowed_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerFailure(f"timeout: {doing} took longer than {allowed_s:g} s; worker killed")
            if not self._selector.select(left):
                continue
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                try:
                    code = self.proc.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    code = None
                raise WorkerFailure(f"scoring worker died while {doing} (exit code {code})")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            return json.loads(line)
        except ValueError:
            raise WorkerFailure(f"unreadable reply from a scoring worker: {line[:200]!r}") from None

    def signal_kill(self) -> None:
        """Kill the process only: safe from any thread (the pipes stay with the thread using them)."""
        if self.proc.poll() is None:
            self.proc.kill()

    def kill(self) -> None:
        """Kill and clean up; only by the thread that holds this worker."""
        self.signal_kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass  # unkillable (D state); nothing more to do without blocking the caller
        self._selector.close()
        for pipe in (self.proc.stdin, self.proc.stdout):
            pipe.close()


class WorkerPool:
    """Up to `size` workers running `target` ("module:function", JSON in and out)."""

    def __init__(self, target: str, size: int, startup_timeout_s: float = 60.0):
        self.target, self.size, self.startup_timeout_s = target, max(1, size), startup_timeout_s
        self.pid = os.getpid()  # a forked child must not talk to its parent's workers
        self._idle: list[_Worker] = []
        self._live: set[_Worker] = set()
        self._slots = 0  # workers alive or starting
        self._closed = False
        self._cond = threading.Condition()
        self._threads = ThreadPoolExecutor(self.size, thread_name_prefix="insandbox-reward")

    async def call_async(self, args: list, timeout_s: float) -> Reply:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, self.call, args, timeout_s)

    def call(self, args: list, timeout_s: float) -> Reply:
        """Run target(*args) in a worker; never raises for anything the worker or the target does."""
        try:  # before taking a worker: arguments that are not JSON must not cost one
            request = (json.dumps({"args": args, "timeout_s": timeout_s}) + "\n").encode()
        except (TypeError, ValueError) as e:
            return Reply(error=f"{type(e).__name__}: {e}")
        worker = self._take()
        started = time.monotonic()
        try:
            if worker is None:
                worker = self._start()
                started = time.monotonic()  # a new worker's start-up is not the request's time
            reply = worker.call(request, timeout_s)
        except WorkerFailure as e:
            self._give_back(worker, broken=True)
            return Reply(error=str(e), seconds=time.monotonic() - started)
        except BaseException:
            self._give_back(worker, broken=True)
            raise
        self._give_back(worker)
        return Reply(reply.get("result"), reply.get("error"), time.monotonic() - started)

    def start(self, count: Optional[int] = None) -> None:
        """Start workers now (each takes about a second to import its scorers) instead of on first use."""
        wanted = min(self.size, count or self.size)
        with self._cond:
            missing = max(0, wanted - self._slots)
            self._slots += missing
        for worker in list(self._threads.map(lambda _: self._start_or_none(), range(missing))):
            self._give_back(worker)

    def close(self) -> None:
        """Stop every worker; calls in flight end with an error reply."""
        with self._cond:
            self._closed = True
            idle, busy = self._idle, [w for w in self._live if w not in self._idle]
            self._idle, self._live = [], set(busy)
            self._cond.notify_all()
        for worker in idle:
            worker.kill()
        for worker in busy:
            worker.signal_kill()  # its thread sees the end of its pipe and cleans up
        self._threads.shutdown(wait=False)

    def _take(self) -> Optional[_Worker]:
        """An idle worker, or None: the caller may start one (its slot is reserved)."""
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("the reward worker pool is closed")
                if self._idle:
                    return self._idle.pop()
                if self._slots < self.size:
                    self._slots += 1
                    return None
                self._cond.wait()

    def _start(self) -> _Worker:
        worker = _Worker(self.target, self.startup_timeout_s)
        with self._cond:
            self._live.add(worker)
        return worker

    def _start_or_none(self) -> Optional[_Worker]:
        try:
            return self._start()
        except WorkerFailure:
            return None

    def _give_back(self, worker: Optional[_Worker], broken: bool = False) -> None:
        """Return a taken slot: its worker goes back to the idle list, or is killed and the slot freed."""
        with self._cond:
            keep = worker is not None and not broken and not self._closed
            if keep:
                self._idle.append(worker)
            else:
                self._slots -= 1
                self._live.discard(worker)
            self._cond.notify()
        if worker is not None and not keep:
            worker.kill()


def _limit_cpu(timeout_s: float) -> None:
    """Let the kernel stop this worker if it computes well past its timeout (the parent kills it
    first; this matters only when the parent is gone)."""
    try:
        import resource
    except ImportError:  # not on Unix: the parent's kill is the only limit
        return
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    limit = int(usage.ru_utime + usage.ru_stime + timeout_s) + _ORPHAN_CPU_MARGIN_S
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (limit, hard))


def serve(target: str) -> None:
    """A worker's life: import `target` (and run its module's `warm_up()`, if any, so that the first
    request does not pay for imports), then answer one JSON request per line until stdin ends."""
    protocol = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # whatever a library prints goes to stderr, not into the replies

    def send(message: dict) -> None:
        protocol.write((json.dumps(message) + "\n").encode())

    try:
        module_name, _, name = target.partition(":")
        module = importlib.import_module(module_name)
        function = getattr(module, name)
        if hasattr(module, "warm_up"):
            module.warm_up()
    except Exception as e:
        send({"ready": False, "error": f"{target}: {type(e).__name__}: {e}"})
        return
    send({"ready": True})
    for line in sys.stdin.buffer:
        request = json.loads(line)
        _limit_cpu(request["timeout_s"])
        try:
            data = json.dumps({"result": function(*request["args"])})
        except Exception as e:
            data = json.dumps({"error": f"{type(e).__name__}: {e}"[:2000]})
        protocol.write((data + "\n").encode())
