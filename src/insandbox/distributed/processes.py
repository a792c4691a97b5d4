"""`insandbox bench --processes N`: the samples of a benchmark run in N worker processes on this machine.

One process runs every sample in one event loop; past ~200 sandboxes at once that loop, not the
cores, is what limits a node (the model client, the channels and the trajectories all share it).
With N processes each runs its share (`concurrency / N` samples at once, its own pool of sandboxes,
its own model client) as a Ray node does (bench.py's BenchNode, in a scratch folder inside the run
folder), and the driver keeps what is the run's own: the rows, the gate of `--concurrency` samples in
flight, results.jsonl, the progress bar and the summary. A finished sample's folder is moved (a
rename, same disk) into the run folder, then its record appended, so `--resume` works as always.

The driver and its workers speak over the workers' stdin and stdout: length-prefixed pickles,
between this process and children it started itself (nothing else can write to those pipes). A
worker's own stdout goes to its stderr, so a library printing cannot break the frames. Ctrl-C is
the driver's: the workers ignore SIGINT and stop when told (their running samples cancelled, their
sandboxes removed) or when their stdin closes (the driver died). A worker that dies stops the run
as an unwritable folder does: everything recorded is kept, and `--resume` finishes it.
"""
from __future__ import annotations

import asyncio
import os
import pickle
import shutil
import struct
import sys
from pathlib import Path
from typing import Any, Optional

import insandbox

from ..bench.data import Row
from ..bench.runner import BenchAborted, BenchConfig, BenchRun
from ..bench.sample import SampleRecord
from ..config import ConfigError
from ..core.errors import InsandboxError
from ..core.hostfiles import no_link_on_the_way
from ..runs import layout
from ..sandbox.pool import PoolStats

HEADER = struct.Struct("!Q")
WORKERS_DIR = ".workers"  # the workers' scratch folders, inside the run folder (same disk: a rename moves)
CLOSE_WAIT_S = 120.0  # for a worker to cancel its samples and remove its sandboxes


async def read_frame(reader: asyncio.StreamReader) -> Any:
    """The next message, or EOFError when the other side is gone."""
    try:
        size = HEADER.unpack(await reader.readexactly(HEADER.size))[0]
        return pickle.loads(await reader.readexactly(size))
    except asyncio.IncompleteReadError as e:
        raise EOFError from e


def frame(message: Any) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


def portable(exc: BaseException) -> BaseException:
    """`exc` as it can cross to the driver: itself where it pickles, else a RuntimeError saying it."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


class Worker:
    """The driver's handle on one worker process."""

    def __init__(self, index: int, proc: asyncio.subprocess.Process):
        self.index, self.proc = index, proc
        self.in_flight = 0
        self.pending: dict[int, asyncio.Future] = {}
        self.reader_task: Optional[asyncio.Task] = None
        self.gone: Optional[str] = None  # why it can take no more requests

    async def read_replies(self) -> None:
        try:
            while True:
                kind, ident, value = await read_frame(self.proc.stdout)
                future = self.pending.pop(ident, None)
                if future is not None and not future.done():
                    (future.set_exception if kind == "error" else future.set_result)(value)
        except (EOFError, OSError):
            pass
        code = await self.proc.wait()
        self.gone = f"worker process {self.index} (pid {self.proc.pid}) ended with exit code {code}"
        for future in self.pending.values():
            if not future.done():
                future.set_exception(WorkerDied(f"{self.gone} while it ran samples"))
        self.pending.clear()

    async def call(self, ident: int, message: tuple) -> Any:
        if self.gone is not None:
            raise WorkerDied(self.gone)
        future = asyncio.get_running_loop().create_future()
        self.pending[ident] = future
        try:
            self.proc.stdin.write(frame(message))
            await self.proc.stdin.drain()
        except (ConnectionError, OSError):
            pass  # the reply reader says why the worker is gone
        return await future


class WorkerDied(InsandboxError, RuntimeError):
    """A worker process ended while it ran samples."""


class ProcessBenchExecutor:
    """BenchRun's samples in worker processes on this machine (runner.SampleExecutor)."""

    same_machine = True

    def __init__(self, processes: int, cfg: BenchConfig):
        if processes < 2:
            raise ConfigError("--processes is 2 or more (1 is the default: every sample in this process)")
        if cfg.run.embedded:
            raise ConfigError("--processes needs a model server (--model and --base-url): the embedded model is "
                              "one llama.cpp process, which more processes of samples would only queue on")
        self.processes = processes
        self.workers: list[Worker] = []
        self.scratch: Optional[Path] = None
        self._next_id = 0
        self.closed_with: list[dict] = []  # each worker's pool figures and engine outages, as it closed

    async def start(self, bench: BenchRun) -> None:
        # each worker's share of the gate sizes its pool, which starts its sandboxes ahead of the samples
        share = -(-bench.cfg.concurrency // self.processes)
        args = bench.executor_args(concurrency=share)
        self.scratch = bench.run_dir / WORKERS_DIR
        try:
            _fresh_folder(self.scratch)
        except OSError as e:
            raise bench.unwritable(e) from e
        # the workers import the insandbox this process runs (a checkout's src/, say), not another install
        src = str(Path(insandbox.__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
        for index in range(self.processes):
            (self.scratch / str(index)).mkdir()
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "insandbox.distributed.process_worker", env=env,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=2 ** 20)
            worker = Worker(index, proc)
            worker.reader_task = asyncio.ensure_future(worker.read_replies())
            self.workers.append(worker)
        await asyncio.gather(*(self._call(w, "open", (*args, self.scratch / str(w.index))) for w in self.workers))
        bench.progress.on_status(f"{self.processes} worker processes, up to {share} samples each")

    async def _call(self, worker: Worker, method: str, args: tuple) -> Any:
        self._next_id += 1
        return await worker.call(self._next_id, (method, self._next_id, args))

    async def run(self, bench: BenchRun, row: Row, repeat: int, mode: str, cut_off: bool) -> SampleRecord:
        worker = min(self.workers, key=lambda w: w.in_flight)
        worker.in_flight += 1
        try:
            moved_from = await self._call(worker, "run", (row, repeat, mode, cut_off))
        except WorkerDied as e:
            raise BenchAborted(f"{e}. Every sample recorded so far is kept; finish the run with: insandbox bench "
                               f"--resume {bench.run_dir}") from e
        finally:
            worker.in_flight -= 1
        record, folder = moved_from
        try:
            await asyncio.to_thread(_move, Path(folder), bench.run_dir,
                                    layout.sample_dir(row.id, mode, repeat))
        except OSError as e:  # the run folder takes nothing more: stop as a local run does
            raise bench.unwritable(e) from e
        record.node = f"process {worker.index}"
        return record

    async def close(self) -> None:
        """Each worker cancels what it still runs and removes its sandboxes; one that does not end in time is
        killed (its sandboxes are then left to `insandbox clean`, as after a SIGKILL)."""
        workers, self.workers = self.workers, []

        async def stop(worker: Worker) -> None:
            try:
                self.closed_with.append(await asyncio.wait_for(self._call(worker, "close", ()), CLOSE_WAIT_S))
            except (WorkerDied, asyncio.TimeoutError):
                pass  # gone already, or stuck: killed below
            try:
                worker.proc.stdin.close()
            except (ConnectionError, OSError):
                pass
            try:
                await asyncio.wait_for(asyncio.shield(worker.proc.wait()), 10)
            except asyncio.TimeoutError:
                worker.proc.kill()
                await worker.proc.wait()
            if worker.reader_task is not None:
                await worker.reader_task

        await asyncio.gather(*(stop(w) for w in workers), return_exceptions=True)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


    def session_summary(self) -> dict:
        """For summary.json's `session`: the workers' pools as one (counts added, timings pooled) and their
        engine outages."""
        pools = [c["sandbox_pool"] for c in self.closed_with if c.get("sandbox_pool") is not None]
        out: dict[str, Any] = {"processes": self.processes,
                               "engine_outages": [o for c in self.closed_with for o in c.get("engine_outages", [])]}
        if pools:
            out["sandbox_pool"] = PoolStats.combined(pools).summary()
        return out


def _fresh_folder(folder: Path) -> None:
    """`folder` made empty: whatever a killed earlier session (or whoever prepared the run folder) left
    there goes, a symbolic link included, which is removed and not followed."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        folder.unlink()
    elif folder.exists():
        shutil.rmtree(folder)
    folder.mkdir()


def _move(source: Path, run_dir: Path, relative: Path) -> None:
    """The sample's folder into the run folder, over what a cut-off earlier session left there (as the
    local runner does, never through a symbolic link on the way)."""
    if not source.exists():  # a sample that wrote nothing
        return
    target = run_dir / relative

    def refuse_links() -> None:
        if not no_link_on_the_way(run_dir, target):
            raise OSError(f"{target}: a symbolic link on the way: insandbox does not write through links")

    refuse_links()  # before making the folders above it: never inside a link's target
    target.parent.mkdir(parents=True, exist_ok=True)
    refuse_links()
    if target.exists():
        shutil.rmtree(target)
    os.replace(source, target)
