"""Admission control: a sandbox starts only when the host has room for one more.

Every sandbox start of the process passes one gate before its container is created, and gives
its slot back when it closes. Starts wait their turn (first come, first served) while the host
is short of something a sandbox needs, so asking for more sandboxes than fit queues instead of
failing:

- memory: MemAvailable minus a reserve, against an estimate per sandbox;
- tasks (pids and threads): the host's count against kernel.pid_max and kernel.threads-max, and
  the pids cgroup limit of the engine where one is set; and the worst case, every live sandbox at
  its process limit (under gVisor, the host tasks that limit allows: 12 per process), which must
  fit too, so that sandboxes fork-bombing together never take the host's last pid;
- open files: fs.file-nr against fs.file-max, this process's own descriptors against its
  RLIMIT_NOFILE (each sandbox holds an attach socket; the soft limit is raised to the hard one
  once), and the engine's (dockerd, containerd) against theirs;
- bridge ports: a Linux bridge takes at most 1,023 interfaces, one per container on it;
- disk: free space where the engine keeps containers (each sandbox has a filesystem there);
- an optional cap on live sandboxes (`--max-sandboxes`, INSANDBOX_MAX_SANDBOXES).

Sandboxes admitted but not started yet count against each resource by their estimate: their
real cost does not show in the host's figures until they run. What cannot be seen from here
(a remote engine, another host's limits) shows up as the engine refusing a start for a
resource reason (EMFILE, ENOMEM, no space left, no address left, "exchange full" from a full
bridge): such a start is not a failure but a wait. The number of live sandboxes at that
moment becomes a cap until one of them closes, and the start is tried again, for at most
`retry_for_s`.

The gate is the process's (every sandbox of the process shares the host). What one session asks of
it beyond the host's figures (its own cap on live sandboxes, where its status lines go) is that
session's `Admission`, handed to its sandboxes in their spec; one session's settings never change
another's.

Checks read /proc and /sys of this machine; those that cannot see the engine's machine are
skipped. INSANDBOX_ADMISSION=off turns the gate off; each threshold can be set through
INSANDBOX_ADMIT_<FIELD> (e.g. INSANDBOX_ADMIT_MEMORY_RESERVE=2g).
"""
from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Optional

from .base import Progress, SetupError

log = logging.getLogger(__name__)

MiB, GiB = 1 << 20, 1 << 30
BRIDGE_MAX_PORTS = 1023  # the kernel's BR_MAX_PORTS is 1024, and port number 0 is never used
# words of the engine's and the kernel's refusals that mean "no room now", not "never"
RESOURCE_WORDS = ("too many open files", "cannot allocate memory", "out of memory", "no space left",
                  "resource temporarily unavailable", "exchange full", "no buffer space", "no available ipv4",
                  "no available ipv6", "no free loop", "failed to set up loop device", "pthread_create failed")
RESOURCE_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOSPC, errno.EAGAIN, errno.ENOBUFS}
if hasattr(errno, "EXFULL"):
    RESOURCE_ERRNOS.add(errno.EXFULL)


class TasksRefused(SetupError):
    """One sandbox's process limit alone is more than this machine's task limit leaves room for."""


@dataclass
class Thresholds:
    """What the gate asks of the host before one more sandbox starts (sizes in bytes)."""

    max_sandboxes: Optional[int] = None  # live sandboxes of this process at most; None: no cap
    memory_per_sandbox: int = 48 * MiB  # an idle sandbox costs the host ~11 MiB; margin for its first commands
    memory_reserve: Optional[int] = None  # kept free for everything else; None: 5% of the memory, at least 512 MiB
    tasks_per_sandbox: int = 16  # threads: measured 15.8 per sandbox at 1,024 (the engine's shim holds ~11)
    tasks_reserve: Optional[int] = None  # None: 5% of the limit, at least 512
    files_per_sandbox: int = 64  # system-wide file handles: measured 57 per sandbox at 1,024 (the shim holds ~32)
    files_reserve: int = 8192
    own_files_per_sandbox: int = 2  # this process: the attach socket, a pooled engine connection
    own_files_reserve: int = 64
    engine_files_per_sandbox: int = 20  # each of dockerd and containerd: ~9 per container measured
    disk_per_sandbox: int = 32 * MiB  # a sandbox's own filesystem starts at ~4 MiB
    disk_reserve: int = 2 * GiB
    retry_for_s: float = 300.0  # a start the engine refused for want of room is retried this long
    poll_s: float = 0.5  # how often a waiting start looks at the host again

    @classmethod
    def from_environment(cls, base: Optional[Thresholds] = None) -> Thresholds:
        """`base` with INSANDBOX_ADMIT_<FIELD> and INSANDBOX_MAX_SANDBOXES applied."""
        from ..core.units import parse_size

        out = base or cls()
        for f in fields(cls):
            raw = os.environ.get("INSANDBOX_MAX_SANDBOXES" if f.name == "max_sandboxes"
                                 else f"INSANDBOX_ADMIT_{f.name.upper()}")
            if raw is None or not raw.strip():
                continue
            try:
                if f.name.endswith(("_s",)):
                    value = float(raw)
                elif f.name.startswith(("memory", "disk")):
                    value = parse_size(raw)
                else:
                    value = int(raw)
            except ValueError:
                raise ValueError(f"INSANDBOX_ADMIT_{f.name.upper()}={raw!r} is not a valid value") from None
            if value < 0 or (f.name == "max_sandboxes" and value == 0):
                raise ValueError(f"{f.name} must be positive, got {raw!r}")
            out = replace(out, **{f.name: value})
        return out


def is_resource_refusal(exc: BaseException) -> bool:
    """The start failed because the host or the engine had no room (and may have later)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS:
            return True
        text = str(exc).lower()
        if any(w in text for w in RESOURCE_WORDS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


# ---------------------------------------------------------------------- what the host has
def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _int(text: str) -> Optional[int]:
    try:
        return int(text.split()[0])
    except (IndexError, ValueError):
        return None


def meminfo() -> dict[str, int]:
    out = {}
    for line in _read("/proc/meminfo").splitlines():
        key, _, rest = line.partition(":")
        n = _int(rest)
        if n is not None:
            out[key] = n * 1024
    return out


def task_limit() -> Optional[int]:
    """The most tasks this machine holds: the lower of kernel.pid_max and kernel.threads-max."""
    limits = [x for x in (_int(_read("/proc/sys/kernel/pid_max")), _int(_read("/proc/sys/kernel/threads-max"))) if x]
    return min(limits) if limits else None


def host_tasks() -> Optional[int]:
    """Threads on the host now (the denominator of /proc/loadavg's fourth field)."""
    parts = _read("/proc/loadavg").split()
    try:
        return int(parts[3].split("/")[1])
    except (IndexError, ValueError):
        return None


def open_fds(pid: str = "self") -> Optional[int]:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def fd_limit(pid: str) -> Optional[int]:
    for line in _read(f"/proc/{pid}/limits").splitlines():
        if line.startswith("Max open files"):
            return _int(line[len("Max open files"):])
    return None


def raise_file_limit() -> tuple[int, int]:
    """This process's soft RLIMIT_NOFILE raised to the hard limit; returns (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft, hard


def human(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


class Host:
    """What the gate knows of the machine behind the sandboxes' engine: nothing, unless the backend in use
    hands it an engine's host (docker/host.py: dockerd's pids cgroups, its storage folder, bridges)."""

    local = False
    root_dir: Optional[str] = None
    cgroups: list[str] = []

    async def look(self) -> None:
        pass

    def engine_pid(self, name: str) -> Optional[str]:
        return None

    async def bridge_of(self, network: str) -> Optional[str]:
        return None


# ---------------------------------------------------------------------- the gate
@dataclass
class Slot:
    """One admitted sandbox; `started()` once it runs, `release()` when it is gone."""

    gate: Gate
    network: str
    bridge: Optional[str]
    tasks: int = 0  # the most host tasks (processes and threads) the sandbox may hold: its pids limit
    starting: bool = True
    released: bool = False
    on_release: Optional[Callable[[], None]] = None  # the session's Admission takes its place back

    def started(self) -> None:
        if self.starting:
            self.starting = False
            self.gate._starting_on(self, -1)

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.started()
            self.gate._release(self)
            if self.on_release is not None:
                self.on_release()


class Gate:
    def __init__(self, thresholds: Optional[Thresholds] = None, enabled: Optional[bool] = None):
        self.thresholds = thresholds or Thresholds.from_environment()
        self.enabled = enabled if enabled is not None else \
            os.environ.get("INSANDBOX_ADMISSION", "on").strip().lower() not in ("off", "0", "no", "false")
        self.live = 0  # admitted and not released
        self.committed_tasks = 0  # the most host tasks the live sandboxes may hold (their pids limits, added)
        self.starting = 0  # admitted, not running yet: not in the host's figures
        self._starting_by_bridge: dict[str, int] = {}
        self.refused_at: Optional[int] = None  # the engine refused a start with this many live: a cap until one closes
        self.waits = 0  # starts that had to wait for room
        self._shortages = 0  # times the first queued start found the host short
        self.retries = 0  # starts retried after a resource refusal
        self._queue: deque[asyncio.Future] = deque()
        self._poke: Optional[asyncio.Future] = None
        self._reporters: list[Progress] = []
        self._said: set[str] = set()  # the kinds of shortage reported while starts wait (each said once)
        self._host: Optional[Host] = None
        self.file_limit = raise_file_limit()

    # ------------------------------------------------------------------ settings
    def configure(self, thresholds: Optional[Thresholds] = None, **changes) -> None:
        self.thresholds = replace(thresholds or self.thresholds, **changes)
        self.poke()

    def report_to(self, on_status: Progress) -> None:
        """Where the gate says why a start waits (a run's status line); the latest one wins."""
        self._reporters = [on_status]

    def say(self, text: str, to: Optional[Progress] = None) -> None:
        """Log `text` and tell it `to` (the waiting session's status line), else the gate's reporters."""
        log.info(text)
        for fn in [to] if to is not None else self._reporters:
            try:
                fn(text)
            except Exception:
                pass

    @property
    def host(self) -> Host:
        if self._host is None:
            self._host = Host()
        return self._host

    def use_host(self, make: Callable[[], Host]) -> None:
        """The engine's host, from the backend that starts sandboxes on it (made once per kind)."""
        if self._host is None or type(self._host) is Host:
            self._host = make()

    # ------------------------------------------------------------------ what is short
    def shortage(self, bridge: Optional[str] = None, tasks: int = 0) -> Optional[tuple[str, str]]:
        """(kind, the status line) of the first resource one more sandbox would not fit in, or None.
        `tasks`: the most host tasks it may hold (0: unknown or unlimited)."""
        t, host = self.thresholds, self.host
        n = self.starting + 1  # the newcomer and those admitted before it that do not show yet
        if t.max_sandboxes is not None and self.live >= t.max_sandboxes:
            return "sandboxes", f"waiting for a sandbox to close: {self.live} live, --max-sandboxes {t.max_sandboxes}"
        if self.refused_at is not None and self.live >= self.refused_at:
            return "refused", (f"waiting for a sandbox to close: the engine refused a start at {self.refused_at} "
                               "live sandboxes")
        mem = meminfo()
        if "MemAvailable" in mem:
            reserve = t.memory_reserve if t.memory_reserve is not None else \
                max(512 * MiB, mem.get("MemTotal", 0) // 20)
            if mem["MemAvailable"] - reserve < n * t.memory_per_sandbox:
                return "memory", (f"waiting for memory: {human(mem['MemAvailable'])} available, {human(reserve)} "
                                  f"reserved, {self.starting} starting at {human(t.memory_per_sandbox)} each")
        why = self._tasks_short(n, tasks)
        if why:
            return "tasks", why
        why = self._files_short(n)
        if why:
            return "open files", why
        if bridge is not None:
            ports = len(os.listdir(f"/sys/class/net/{bridge}/brif")) if os.path.isdir(
                f"/sys/class/net/{bridge}/brif") else 0
            if ports + self._starting_by_bridge.get(bridge, 0) + 1 > BRIDGE_MAX_PORTS:
                return "bridge", (f"waiting for a port on bridge {bridge}: {ports} of {BRIDGE_MAX_PORTS} taken "
                                  "(a Linux bridge takes no more; --network none, or another network, has room)")
        if host.root_dir is not None:
            try:
                st = os.statvfs(host.root_dir)
            except OSError:
                st = None
            if st is not None and st.f_bavail * st.f_frsize - t.disk_reserve < n * t.disk_per_sandbox:
                return "disk", (f"waiting for disk space: {human(st.f_bavail * st.f_frsize)} free in "
                                f"{host.root_dir}, {human(t.disk_reserve)} reserved")
        return None

    def _tasks_short(self, n: int, most: int = 0) -> str:
        t, need = self.thresholds, n * self.thresholds.tasks_per_sandbox
        tasks = host_tasks()
        limit = task_limit()
        if tasks is not None and limit:
            reserve = t.tasks_reserve if t.tasks_reserve is not None else max(512, limit // 20)
            if tasks + need + reserve > limit:
                return f"waiting for tasks: {tasks:,} threads on the host, limit {limit:,}, {reserve:,} reserved"
            # the worst case: every live sandbox and this one at its limit (what they hold now is in
            # `tasks` already, counted twice: a margin)
            if most and tasks + self.committed_tasks + most + reserve > limit:
                if self.committed_tasks == 0 and most + reserve + tasks > limit and self.live == 0:
                    raise TasksRefused(
                        f"a sandbox may hold {most:,} tasks (its process limit), more than this machine has room "
                        f"for ({limit:,} in kernel.pid_max / threads-max, {tasks:,} in use, {reserve:,} reserved): "
                        "lower --pids-limit or raise kernel.pid_max")
                return (f"waiting for tasks: {self.live} live sandbox(es) may hold {self.committed_tasks:,} tasks at "
                        f"their process limits, this one {most:,} more, the host's limit is {limit:,} "
                        f"({reserve:,} reserved, {tasks:,} in use); a lower --pids-limit or a higher "
                        "kernel.pid_max lets more run at once")
        for cg in self.host.cgroups:
            cap, cur = _read(f"{cg}/pids.max").strip(), _int(_read(f"{cg}/pids.current"))
            if cap.isdigit() and cur is not None and cur + need > int(cap):
                return f"waiting for tasks: the engine's cgroup {cg} has {cur:,} of {int(cap):,}"
        return ""

    def _files_short(self, n: int) -> str:
        t = self.thresholds
        nr = _read("/proc/sys/fs/file-nr").split()
        if len(nr) == 3 and nr[0].isdigit() and nr[2].isdigit():
            used, top = int(nr[0]), int(nr[2])
            if used + n * t.files_per_sandbox + t.files_reserve > top:
                return f"waiting for open files: {used:,} open on the host, fs.file-max {top:,}"
        own, soft = open_fds(), resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if own is not None and soft != resource.RLIM_INFINITY and own + n * t.own_files_per_sandbox + \
                t.own_files_reserve > soft:
            return f"waiting for open files: this process has {own:,} open, its limit is {soft:,}"
        for name in ("dockerd", "containerd"):
            pid = self.host.engine_pid(name)
            if pid is None:
                continue
            cur, cap = open_fds(pid), fd_limit(pid)
            if cur is not None and cap and cur + n * t.engine_files_per_sandbox > cap:
                return f"waiting for open files: {name} has {cur:,} open, its limit is {cap:,}"
        return ""

    # ------------------------------------------------------------------ admission
    async def admit(self, network: str = "bridge", say: Optional[Progress] = None, tasks: int = 0) -> Slot:
        """Wait for this start's turn and for room on the host; the slot must be released. `say`: where
        the reasons it waits go (default: the gate's reporters). `tasks`: the most host tasks the
        sandbox may hold (its pids limit; 0 when it has none)."""
        bridge = None
        if self.enabled:
            bridge = await self._wait_for_room(network, say, tasks)
        self.live += 1
        self.committed_tasks += tasks
        slot = Slot(self, network, bridge, tasks)
        self._starting_on(slot, +1)
        return slot

    async def _wait_for_room(self, network: str, say: Optional[Progress], tasks: int = 0) -> Optional[str]:
        """Returns the bridge the sandbox will take a port of, if any."""
        loop = asyncio.get_running_loop()
        turn = loop.create_future()
        self._queue.append(turn)  # first, so that the order is the order of the calls
        began, shortages = time.monotonic(), self._shortages
        try:
            await self.host.look()
            bridge = await self.host.bridge_of(network)
            if self._queue[0] is not turn:
                await turn  # the one before us was admitted (or gave up)
            while True:
                short = self.shortage(bridge, tasks)
                if short is None:
                    break
                kind, line = short
                self._shortages += 1
                if kind not in self._said:
                    self._said.add(kind)
                    queued = len(self._queue) - 1
                    self.say(line + (f" ({queued} more start{'s' * (queued != 1)} queued)" if queued else ""), say)
                self._poke = loop.create_future()
                try:
                    await asyncio.wait_for(asyncio.shield(self._poke), self.thresholds.poll_s)
                except asyncio.TimeoutError:
                    pass
        finally:
            self._queue.remove(turn)
            if self._queue and not self._queue[0].done():
                self._queue[0].set_result(None)
        waited = self._shortages != shortages  # the host was short while this start was queued
        self.waits += waited
        if waited and self._said and not self._queue:
            self.say(f"room again: starts go on (the last waited {time.monotonic() - began:.0f} s)", say)
            self._said = set()
        return bridge

    def poke(self) -> None:
        """Something changed (a sandbox closed, thresholds moved): the first waiting start looks again."""
        if self._poke is not None and not self._poke.done():
            try:
                self._poke.set_result(None)
            except RuntimeError:
                pass

    def _starting_on(self, slot: Slot, delta: int) -> None:
        self.starting += delta
        if slot.bridge:
            self._starting_by_bridge[slot.bridge] = self._starting_by_bridge.get(slot.bridge, 0) + delta
        if delta < 0:
            self.poke()

    def _release(self, slot: Slot) -> None:
        self.live -= 1
        self.committed_tasks -= slot.tasks
        self.refused_at = None  # one closed: the next start may try
        self.poke()

    def refused(self, slot: Slot) -> None:
        """The engine refused this start for want of room: no more than those live now until one closes."""
        slot.release()
        self.refused_at = max(1, self.live) if self.refused_at is None else min(self.refused_at, max(1, self.live))

    # ------------------------------------------------------------------ a start
    async def start(self, network: str, attempt: Callable[[Slot], Awaitable[None]],
                    reset: Callable[[], None], say: Optional[Progress] = None, tasks: int = 0) -> Slot:
        """Admit, then `attempt` the start; one refused for a resource reason waits and is tried again
        (after `reset()`) for at most retry_for_s. The attempt cleans up after itself when it fails."""
        first_refusal: Optional[float] = None
        while True:
            slot = await self.admit(network, say, tasks)
            try:
                await attempt(slot)
                slot.started()
                return slot
            except BaseException as e:
                if isinstance(e, Exception) and self.enabled and is_resource_refusal(e):
                    now = time.monotonic()
                    first_refusal = first_refusal or now
                    if now - first_refusal < self.thresholds.retry_for_s:
                        self.refused(slot)
                        self.retries += 1
                        self.say(f"a sandbox start was refused for want of room ({_short(e)}): it waits and "
                                 "is tried again", say)
                        reset()
                        await asyncio.sleep(min(self.thresholds.poll_s * 4, 5.0))
                        continue
                slot.release()
                raise


def _short(e: BaseException, n: int = 200) -> str:
    """The head and the tail (where the engine puts its reason) of a long message."""
    text = " ".join(str(e).split())
    return text if len(text) <= n else f"{text[:n // 2 - 3]} ... {text[-n // 2:]}"


_gate: Optional[Gate] = None


def gate() -> Gate:
    """The process-wide gate (every backend's sandboxes share the host)."""
    global _gate
    if _gate is None:
        _gate = Gate()
    return _gate


class Admission:
    """One session's way through the process's gate: its own cap on live sandboxes (--max-sandboxes)
    and its own status line. A backend's start goes through the Admission in its spec
    (`SandboxSpec.admission`), else straight through the gate."""

    def __init__(self, max_sandboxes: Optional[int] = None, on_status: Optional[Progress] = None,
                 through: Optional[Gate] = None):
        self.gate = through or gate()
        self.max_sandboxes = max_sandboxes
        self.on_status = on_status
        self.live = 0  # this session's sandboxes admitted and not released
        self._places = asyncio.Semaphore(max_sandboxes) if max_sandboxes is not None else None
        self._said = False  # "waiting for a sandbox to close" said since the last start that did not wait

    def say(self, text: str) -> None:
        self.gate.say(text, self.on_status)

    async def start(self, network: str, attempt: Callable[[Slot], Awaitable[None]],
                    reset: Callable[[], None], tasks: int = 0) -> Slot:
        """As Gate.start, after this session's own cap lets one more sandbox live."""
        await self._take_place()
        try:
            slot = await self.gate.start(network, attempt, reset, self.on_status, tasks)
        except BaseException:
            self._give_back()
            raise
        slot.on_release = self._give_back
        return slot

    async def _take_place(self) -> None:
        if self._places is not None:
            if self._places.locked() and not self._said:
                self._said = True
                self.say(f"waiting for a sandbox to close: {self.live} live, --max-sandboxes {self.max_sandboxes}")
            elif not self._places.locked():
                self._said = False
            await self._places.acquire()
        self.live += 1

    def _give_back(self) -> None:
        self.live -= 1
        if self._places is not None:
            self._places.release()
