"""`insandbox bench --ray`: the samples of a benchmark run on the nodes of a Ray cluster.

The driver (the machine that ran `insandbox bench`) keeps everything that is the run's own: the
rows, the gate of `--concurrency` samples in flight (in all), the results store and the summary.
Each node has one worker (a `BenchNode` actor, cluster.py) with its own model client, its own
sandbox engine (prepared, i.e. the image built if missing, on its first sample) and a scratch run
folder on its own disk. A sample runs there exactly as it runs locally (bench.sample.SampleRunner:
retries, engine outages, scoring); its folder (trajectory.json, files/, answer.txt) then comes
back packed with the record, is unpacked into the driver's run folder, and only then is the
record appended, as each sample finishes. `--resume` therefore works as it always did, with or
without Ray, on the same results.jsonl.

A sample whose node is lost (the machine, its raylet or the worker process died) is run again
from the start on another node: the loss is not one of its retries, and is listed in its
record (`lost_nodes`). Each record names the node that ran it (`node`).
"""
from __future__ import annotations

import asyncio
import io
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Optional

from ..bench.data import Row
from ..bench.runner import BenchAborted, BenchConfig, BenchRun, open_sample_runner
from ..bench.sample import SampleRecord, SampleRunner
from ..config import ConfigError
from ..core.redact import redact
from ..core.units import is_loopback
from ..runs import layout
from .cluster import NodePool, NoNodesLeft, connect, disconnect


def pack(folder: Path) -> bytes:
    """A folder as a gzipped tar (empty bytes for a folder that is not there)."""
    if not folder.is_dir():
        return b""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        tar.add(folder, arcname=".")
    return buf.getvalue()


def unpack(data: bytes, folder: Path) -> None:
    """Unpack what `pack` made into `folder` (over what an earlier, cut-off session left there)."""
    folder.mkdir(parents=True, exist_ok=True)
    if data:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.10.12
                tar.extractall(folder, filter="data")  # relative paths inside `folder` only
            else:
                tar.extractall(folder)  # packed by our own node, from a folder it wrote


class BenchNode:
    """The worker on one node: runs samples of one benchmark run, many at once (an async actor), through
    a SampleRunner of its own whose folders go in a scratch folder on this node."""

    def __init__(self, cfg: BenchConfig, task, prompts, max_steps: int, prices, judge_prompt: Optional[str],
                 scratch: Optional[Path] = None, prestart: bool = False):
        # `scratch` and `prestart`: a worker process of processes.py, which is given its folder and its share
        # of the samples in flight (so its pool starts that many sandboxes ahead)
        self.scratch = Path(scratch) if scratch is not None else Path(tempfile.mkdtemp(prefix="insandbox-ray-"))
        self.prestart = prestart
        if judge_prompt is not None:  # the driver's file, as text: written here for the scorer to read
            path = self.scratch / "judge_prompt.txt"
            path.write_text(judge_prompt, encoding="utf-8")
            cfg = cfg.model_copy(update={"judge_prompt": path})
        # the driver's task, prompts, step limit (the task's, or --max-steps) and price table (a --prices
        # file is on the driver's machine)
        self.cfg, self.task, self.prompts, self.max_steps, self.prices = cfg, task, prompts, max_steps, prices
        self.run_dir = self.scratch / "run"
        self.samples: Optional[SampleRunner] = None
        self._ready: Optional[asyncio.Future] = None
        self._running: set[asyncio.Task] = set()  # samples in flight, cancelled by `close`

    async def _prepare(self) -> None:
        # the image is built here on first use; the pool is this node's own, recycling on its own engine,
        # and starts sandboxes only when a sample asks (this node does not know how many will come)
        self.samples = await open_sample_runner(self.cfg, self.task, self.prompts, self.run_dir,
                                                max_steps=self.max_steps, prices=self.prices,
                                                sandbox=self.cfg.mode in ("sandbox", "both"),
                                                prestart=self.prestart)

    def folder(self, row: Row, repeat: int, mode: str) -> Path:
        """Where a sample's folder is written on this node."""
        return self.run_dir / layout.sample_dir(row.id, mode, repeat)

    async def run_sample(self, row: Row, repeat: int, mode: str, cut_off: bool) -> dict[str, Any]:
        """The record, and the sample's folder packed (it is removed here)."""
        folder = self.folder(row, repeat, mode)
        try:
            record = await self.run_sample_here(row, repeat, mode, cut_off)
            files = await asyncio.to_thread(pack, folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return {"record": record, "files": files}

    async def run_sample_here(self, row: Row, repeat: int, mode: str, cut_off: bool) -> SampleRecord:
        """The record; the sample's folder stays in this node's run folder (`run_dir`)."""
        task = asyncio.current_task()
        self._running.add(task)
        try:
            if self._ready is None:  # the first sample prepares the node; the others wait for it
                self._ready = asyncio.ensure_future(self._prepare())
            try:
                await asyncio.shield(self._ready)
            except Exception:
                self._ready = None  # the next sample tries again (the error reaches the driver now)
                raise
            return await self.samples.run(row, repeat, mode, cut_off)
        finally:
            self._running.discard(task)

    async def close(self) -> None:
        """The run is over (or stopped): samples still running here are cancelled (their sandboxes
        removed, as on Ctrl-C), then the session and the clients closed and the scratch folder removed."""
        for task in self._running:
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        if self.samples is not None:
            await self.samples.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


class RayBenchExecutor:
    """BenchRun's samples on a Ray cluster (runner.SampleExecutor)."""

    same_machine = False

    def __init__(self, address: str, cfg: BenchConfig):
        if cfg.run.embedded:
            raise ConfigError("--ray needs a model server every node can reach (--model and --base-url): the "
                              "embedded model runs on one machine")
        self.address = address
        self.pool: Optional[NodePool] = None
        self._connected = connect(address)

    async def start(self, bench: BenchRun) -> None:
        args = bench.executor_args()
        run = args[0].run
        self.pool = NodePool(BenchNode, args, max_concurrency=bench.cfg.concurrency + 1,
                             on_status=bench.progress.on_status)
        if not self.pool.ready():
            raise ConfigError(f"--ray {self.address}: the cluster has no alive node")
        bench.progress.on_status(f"Ray: {len(self.pool.ready())} node(s): {self.pool.describe()}")
        if is_loopback(run.base_url) and len({n.address for n in self.pool.ready()}) > 1:
            bench.progress.on_status(f"warning: the model server {redact(run.base_url)} is on this machine's loopback: "
                                     "nodes on other machines cannot reach it (give an address they can)")

    async def run(self, bench: BenchRun, row: Row, repeat: int, mode: str, cut_off: bool) -> SampleRecord:
        try:
            out, node, lost = await self.pool.call("run_sample", row, repeat, mode, cut_off)
        except NoNodesLeft as e:
            raise BenchAborted(f"{e}. Every sample recorded so far is kept; finish the run with: insandbox bench "
                               f"--resume {bench.run_dir} --ray {self.address} (or without --ray, here)") from e
        record: SampleRecord = out["record"]
        try:
            await asyncio.to_thread(unpack, out["files"], bench.run_dir / layout.sample_dir(row.id, mode, repeat))
        except OSError as e:  # the driver's run folder takes nothing more: stop as a local run does
            raise bench.unwritable(e) from e
        record.node, record.node_address, record.lost_nodes = node.id[:12], node.address, lost
        if record.engine_gone is not None:  # the node's engine did not come back
            record.engine_gone = f"on Ray node {node.address}: {record.engine_gone}"
        return record

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close("close")
            self.pool = None
        if self._connected:
            disconnect()
            self._connected = False

    def session_summary(self) -> dict:
        return {}  # each record names its node; the nodes' pools are not added up


async def run_bench(cfg: BenchConfig, progress=None, resume: Optional[Path] = None, concurrency: Optional[int] = None,
                    ray: Optional[str] = None, processes: int = 1):
    """bench.runner.run_bench, with `ray` (a cluster address, or "auto"): the samples run on the nodes of
    that Ray cluster; with `processes` > 1: in that many worker processes on this machine."""
    from ..bench import runner

    executor = None
    if ray and processes > 1:
        raise ConfigError("--processes and --ray: choose one (on a Ray cluster each node runs its own worker)")
    if processes > 1:
        from .processes import ProcessBenchExecutor

        executor = ProcessBenchExecutor(processes, runner.resumed_config(cfg, resume, concurrency))
    elif ray:
        # joins the cluster now: a wrong address stops before any folder exists
        executor = RayBenchExecutor(ray, runner.resumed_config(cfg, resume, concurrency))
    return await runner.run_bench(cfg, progress, resume=resume, concurrency=concurrency, executor=executor)
