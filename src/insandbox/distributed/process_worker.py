"""A worker process of `insandbox bench --processes N` (processes.py): runs the samples its driver sends,
many at once, through a BenchNode of its own, and answers each with the record and where its folder is.

    python -m insandbox.distributed.process_worker   (started by the driver; its stdin and stdout are the driver's)
"""
from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any, Optional

from .bench import BenchNode
from .processes import frame, portable, read_frame


async def serve(reader: asyncio.StreamReader, out: Any) -> None:
    node: Optional[BenchNode] = None
    running: set[asyncio.Task] = set()

    def reply(kind: str, ident: int, value: Any) -> None:
        out.write(frame((kind, ident, value)))

    async def run(ident: int, args: tuple) -> None:
        try:
            record = await node.run_sample_here(*args)
            row, repeat, mode, _ = args
            reply("done", ident, (record, str(node.folder(row, repeat, mode))))
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # the driver raises it where a local sample would have
            reply("error", ident, portable(e))

    closing = 0  # the id of the driver's "close", answered with this worker's figures once all is removed
    try:
        while True:
            try:
                method, ident, args = await read_frame(reader)
            except EOFError:  # the driver is gone: stop as if told to
                break
            if method == "open":
                *node_args, scratch = args
                node = BenchNode(*node_args, scratch=scratch, prestart=True)
                reply("done", ident, None)
            elif method == "run":
                task = asyncio.ensure_future(run(ident, args))
                running.add(task)
                task.add_done_callback(running.discard)
            elif method == "close":
                closing = ident
                break
    finally:
        samples = node.samples if node is not None else None
        if node is not None:
            await node.close()  # cancels the samples still running, removes the sandboxes and the scratch
        for task in list(running):
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        if closing:
            pool = samples.session.pool if samples is not None else None
            reply("done", closing, {"sandbox_pool": pool.stats if pool is not None else None,
                                    "engine_outages": samples.engine.outages if samples is not None else []})


async def main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2 ** 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    # the frames get the real stdout; what anything else prints goes to stderr
    frames = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol, frames)
    try:
        await serve(reader, transport)
        while transport.get_write_buffer_size():  # the last answer on its way before the loop ends
            await asyncio.sleep(0.01)
    finally:
        transport.close()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the driver too, which tells us to stop
    asyncio.run(main())
