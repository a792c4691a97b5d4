"""What the engine says happened to this process's containers, read as it happens: its event stream.

Who ended an episode decides its fate (retried or scored, masked or trained on), so the reason a
container died must rest on what the sandbox cannot forge. The engine records it: a `kill` event is
someone calling the engine's API to stop the container (a user's `docker kill`, `insandbox clean --all`,
a daemon going down), which no process inside the sandbox can do, since it has no way to the engine; an
`oom` event is the kernel enforcing the container's own memory limit; `die` is the end, with its exit
code. A stream broken while the container lived means the engine itself went away.

One thread per engine and process reads the stream of the containers this process owns (their owner
label), keeping the last few events of each; `Watcher.history` waits briefly for a death to arrive.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Optional

from . import engine
from .labels import LABEL_OWNER, owner_label

KEPT_CONTAINERS = 8192  # containers whose events are kept (the oldest forgotten first)
KEPT_EVENTS = 16  # events kept per container
RECONNECT_S = 1.0


@dataclass(frozen=True)
class Event:
    action: str  # kill, oom, die, start, destroy...
    at: float  # the engine's time, in seconds
    attributes: dict = field(default_factory=dict, compare=False)


@dataclass
class History:
    """What the engine said of one container, and whether this process heard all of it."""

    events: list[Event]
    complete: bool  # the stream was up from before the container started until now
    stream_broke_at: Optional[float] = None  # the engine's stream went away while it lived (a daemon restart)

    def first(self, action: str) -> Optional[Event]:
        return next((e for e in self.events if e.action == action), None)

    def killed_from_outside(self) -> Optional[Event]:
        """A `kill` through the engine's API before the container died: the sandbox cannot do that."""
        die = self.first("die")
        return next((e for e in self.events if e.action == "kill" and (die is None or e.at <= die.at)), None)


class Watcher:
    """The event stream of one engine, for the containers of this process."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._events: OrderedDict[str, deque[Event]] = OrderedDict()
        self._thread: Optional[threading.Thread] = None
        self.up_since: Optional[float] = None  # this machine's time the current stream was opened
        self.breaks: list[float] = []  # when streams that were up broke (this machine's time)
        self.unavailable = False  # the engine would not give a stream at all

    def ensure(self) -> None:
        """Start reading, once per process (the stream is open before this returns, or has failed)."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="insandbox-engine-events", daemon=True)
            self._thread.start()
            self._lock.wait_for(lambda: self.up_since is not None or self.unavailable, timeout=10)

    def _run(self) -> None:
        while True:
            stream = None
            try:
                stream = engine.api().events(decode=True, filters={"type": ["container"],
                                                                   "label": [f"{LABEL_OWNER}={owner_label()}"]})
                with self._lock:
                    self.up_since = time.time()
                    self._lock.notify_all()
                for raw in stream:
                    self._note(raw)
            except Exception:
                pass
            finally:
                if stream is not None:
                    try:
                        stream.close()
                    except Exception:
                        pass
            with self._lock:
                if self.up_since is not None:  # a stream that was up ended: the engine went away
                    self.breaks.append(time.time())
                else:  # never up (an engine without the endpoint): no evidence either way
                    self.unavailable = True
                self.up_since = None
                self._lock.notify_all()
            time.sleep(RECONNECT_S)

    def _note(self, raw: dict) -> None:
        cid = raw.get("id") or (raw.get("Actor") or {}).get("ID")
        action = str(raw.get("Action") or raw.get("status") or "").split(":")[0]
        if not cid or not action:
            return
        at = raw.get("timeNano", 0) / 1e9 or float(raw.get("time") or time.time())
        attrs = (raw.get("Actor") or {}).get("Attributes") or {}
        kept = {k: attrs[k] for k in ("signal", "exitCode") if k in attrs}
        with self._lock:
            queue = self._events.get(cid)
            if queue is None:
                queue = self._events[cid] = deque(maxlen=KEPT_EVENTS)
                while len(self._events) > KEPT_CONTAINERS:
                    self._events.popitem(last=False)
            queue.append(Event(action, at, kept))
            self._lock.notify_all()

    def history(self, container_id: str, started_at: float, wait_for_die_s: float = 2.0) -> History:
        """What the engine said of a container started at `started_at` (this machine's time), once its
        death has arrived (or wait_for_die_s passed: the stream may lag behind the inspect)."""
        deadline = time.monotonic() + wait_for_die_s
        with self._lock:
            while True:
                events = list(self._events.get(container_id, ()))
                if any(e.action == "die" for e in events) or time.monotonic() >= deadline:
                    break
                self._lock.wait(timeout=max(deadline - time.monotonic(), 0.0))
            broke = next((b for b in self.breaks if b >= started_at), None)
            complete = self.up_since is not None and self.up_since <= started_at and broke is None
        return History(events, complete, broke)


_watchers: dict[str, Watcher] = {}
_watchers_lock = threading.Lock()


def watcher() -> Watcher:
    """This process's watcher of the current engine (started on first use)."""
    with _watchers_lock:
        w = _watchers.get(engine.docker_host())
        if w is None:
            w = _watchers[engine.docker_host()] = Watcher()
    w.ensure()
    return w
