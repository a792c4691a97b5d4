"""Live updates: a Server-Sent Events stream that polls what a page shows (about once a second) and sends
`change` when it differs, `end` when the thing watched has finished. The page then fetches the
fragments that changed (static/viewer.js turns each event into a `live-change` event htmx listens to).

Polling the disk instead of watching it with inotify keeps this portable and cheap: a stat or two per
second per open page, and one index scan a second however many pages watch the runs list."""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import StreamingResponse

POLL_S = 1.0
KEEPALIVE_S = 15.0  # a comment now and then, so a closed page is noticed


def event(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def stream(request: Request, probe: Callable[[], tuple[Any, bool]], poll_s: float = POLL_S) -> StreamingResponse:
    """`probe()` (run in a thread) returns (a stamp of what is shown, whether it has finished)."""

    async def events() -> AsyncIterator[str]:
        stamp, done = await run_in_threadpool(probe)
        yield "retry: 2000\n\n"
        if done:
            yield event("end", {})
            return
        quiet = 0.0
        while not await request.is_disconnected():
            await asyncio.sleep(poll_s)
            new, done = await run_in_threadpool(probe)
            if done:  # the page reloads what changed once more when it gets this
                yield event("end", {})
                return
            if new != stamp:
                stamp, quiet = new, 0.0
                yield event("change", {})
            else:
                quiet += poll_s
                if quiet >= KEEPALIVE_S:
                    quiet = 0.0
                    yield ": still here\n\n"

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
