"""What the host reads of a sandbox from outside it, never asking the sandbox.

The in-sandbox server runs beside the model's code, as the same user, in the same namespaces, so what
it reports is a claim. The facts the host establishes itself come from here: the sandbox's processes
as this machine's /proc shows them (found through the sandbox's cgroup or its pid namespace by the
backend), its first process's settings, the times of a folder's entries, the sockets left in its
network namespace. Each reader returns None where this machine cannot see the fact: the caller then
fails closed (discards the sandbox, or says it could not check).
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# the server's own settings that any process of the sandbox's user may change, as /proc shows them
INIT_FILES = ("coredump_filter", "oom_score_adj", "limits", "autogroup", "timerslack_ns", "comm")
INIT_STATUS_KEYS = ("Cpus_allowed_list", "Mems_allowed_list", "NoNewPrivs", "Seccomp", "CapInh", "CapPrm", "CapEff",
                    "CapBnd", "CapAmb", "Uid", "Gid", "Groups", "Speculation_Store_Bypass")


@dataclass(frozen=True)
class Task:
    """One process of the sandbox, as this machine numbers and sees it."""

    pid: int
    ppid: int
    state: str
    start: int  # clock ticks since boot (the same clock as boot_ticks())
    ns_pid: int  # its number inside the sandbox's pid namespace
    running: bool  # still runs code (a zombie leader whose other threads run does)


def boot_ticks() -> int:
    """Now, in the clock of /proc/PID/stat's start times (ticks since boot, suspend included)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * CLOCK_TICKS)


def _read(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None


def read_task(pid: int) -> Optional[Task]:
    """The process `pid` of this machine, or None once it is gone (reaped)."""
    stat = _read(f"/proc/{pid}/stat")
    status = _read(f"/proc/{pid}/status")
    if not stat or not status:
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # the name in parentheses may hold anything
    ns_pid = pid
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            ns_pid = int(line.split()[-1])
    state = fields[0]
    running = state != "Z"
    if not running:  # a thread-group leader that left alone: its threads go on
        try:
            running = len(os.listdir(f"/proc/{pid}/task")) > 1
        except OSError:
            running = False
    return Task(pid, int(fields[1]), state, int(fields[19]), ns_pid, running)


def read_pids(path: str) -> Optional[set[int]]:
    """The pids a cgroup's cgroup.procs (or tasks) lists, None where it cannot be read."""
    text = _read(path)
    if text is None:
        return None
    try:
        return {int(x) for x in text.split()}
    except ValueError:
        return None


def tasks_of(pids: Iterable[int]) -> dict[int, Task]:
    out = {}
    for pid in pids:
        t = read_task(pid)
        if t is not None:
            out[pid] = t
    return out


def kill(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def command_leftovers(tasks: dict[int, Task], spared: set[int], start: int, last_ns_pid: int) -> set[int]:
    """The processes of a command that began at `start` (boot ticks) still running: every process
    started since then, unless it descends from one that was already running (a background job of an
    earlier command may fork at any time). Start times tick at 100 Hz; within a tick of `start`, the
    pid counter decides (pids are handed out in increasing order: `last_ns_pid` was the last one
    handed out when the command began). `spared`: the sandbox's server and its shell."""
    def new(t: Task) -> bool:
        if t.start > start + 1:
            return True
        return t.start >= start - 1 and t.ns_pid > last_ns_pid

    fresh = {pid for pid, t in tasks.items() if pid not in spared and new(t)}
    old = set(tasks) - fresh - spared

    def descends_from_old(pid: int) -> bool:
        for _ in range(len(tasks) + 1):
            parent = tasks[pid].ppid if pid in tasks else 0
            if parent in old:
                return True
            if parent in spared or parent not in tasks:
                return False
            pid = parent
        return False

    return {pid for pid in fresh if tasks[pid].running and not descends_from_old(pid)}


def wait_gone(read, pids: set[int], wait_s: float) -> set[int]:
    """Kill `pids` again and again until `read()` (the sandbox's pids now) holds none of them, or
    wait_s passed; returns those still there (a process in uninterruptible sleep, say)."""
    deadline = time.monotonic() + wait_s
    while True:
        now = read()
        if now is None:
            return pids
        left = {p for p in pids if p in now and (t := read_task(p)) is not None and t.running}
        if not left or time.monotonic() > deadline:
            return left
        kill(left)
        time.sleep(0.01)


def init_fingerprint(pid: int) -> Optional[dict]:
    """What any process of the sandbox's user could change about its first process (resource limits,
    OOM score, core dump filter, CPU affinity, priority...), read from this machine's /proc. None
    where the process cannot be read."""
    out: dict = {}
    for name in INIT_FILES:
        out[name] = _read(f"/proc/{pid}/{name}")
    status = _read(f"/proc/{pid}/status")
    stat = _read(f"/proc/{pid}/stat")
    if status is None or stat is None:
        return None
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in INIT_STATUS_KEYS:
            out[key] = value.strip()
    fields = stat[stat.rfind(")") + 2:].split()
    out["priority nice rt_priority policy"] = [fields[15], fields[16], fields[37], fields[38]]
    try:
        out["affinity"] = sorted(os.sched_getaffinity(pid))
    except OSError:
        out["affinity"] = None
    return out


def _open_dir_quietly(path: str, dir_fd: Optional[int] = None) -> int:
    """A folder opened for listing without moving its access time (O_NOATIME: root may)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags | os.O_NOATIME, dir_fd=dir_fd)
    except PermissionError:
        return os.open(path, flags, dir_fd=dir_fd)


def entry_times(root: str, skip: tuple[str, ...] = ()) -> Optional[dict[str, tuple]]:
    """{relative path: (type and mode, owner, group, atime, mtime)} of `root` (as ".") and every entry
    under it, not following links nor crossing into another file system; None where `root` cannot be
    read. Listing moves no access time. `skip`: folders whose contents are left out."""
    out: dict[str, tuple] = {}
    try:
        top = os.stat(root)
        fd = _open_dir_quietly(root)
    except OSError:
        return None

    def meta(st: os.stat_result) -> tuple:
        return (st.st_mode, st.st_uid, st.st_gid, st.st_atime_ns, st.st_mtime_ns)

    out["."] = meta(top)
    todo = [("", fd)]
    try:
        while todo:
            rel, dfd = todo.pop()
            try:
                for e in os.scandir(dfd):
                    st = e.stat(follow_symlinks=False)
                    if st.st_dev != top.st_dev:  # a mount inside (another file system): not this one's
                        continue
                    sub = f"{rel}/{e.name}" if rel else e.name
                    out[sub] = meta(st)
                    if e.is_dir(follow_symlinks=False) and sub not in skip:
                        try:
                            todo.append((sub, _open_dir_quietly(e.name, dir_fd=dfd)))
                        except OSError:
                            pass
            finally:
                os.close(dfd)
    finally:
        for _, dfd in todo:
            os.close(dfd)
    return out


def put_times_back(root: str, want: dict[str, tuple], have: dict[str, tuple]) -> None:
    """Give the entries under `root` whose type, mode and owner are as in `want` their access and
    modification times of `want` again (their change time moves: the kernel allows no other way)."""
    for rel in sorted(want, key=lambda r: r.count("/"), reverse=True):  # deepest first
        w, h = want[rel], have.get(rel)
        if h is None or h[:3] != w[:3] or h[3:] == w[3:]:
            continue
        try:
            os.utime(root if rel == "." else os.path.join(root, rel), ns=(w[3], w[4]), follow_symlinks=False)
        except OSError:
            pass  # the check after says what is still different


def socket_count(pid: int) -> Optional[int]:
    """TCP sockets (any state: TIME_WAIT ones outlive their processes) in the network namespace of
    process `pid`, None where it cannot be read. From the namespace's own counters in sockstat (reading
    /proc/PID/net/tcp walks the machine's whole connection table: ~15 ms here)."""
    total = 0
    for name in ("sockstat", "sockstat6"):
        text = _read(f"/proc/{pid}/net/{name}")
        if text is None:
            if name == "sockstat6":  # a kernel without IPv6
                continue
            return None
        for line in text.splitlines():
            key, _, rest = line.partition(":")
            if key in ("TCP", "TCP6"):
                fields = rest.split()
                counts = dict(zip(fields[::2], fields[1::2]))
                try:
                    total += int(counts.get("inuse", 0)) + (int(counts.get("tw", 0)) if key == "TCP" else 0)
                except ValueError:
                    return None
    return total


class _IpcLooker:
    """One thread of this process that reads other IPC namespaces' System V objects: /proc/sysvipc shows
    the reader's namespace, and setns changes the calling thread's only, so this thread enters the
    sandbox's namespace for each look and goes back to its own (a thread started per look cost up to
    ~10 ms on a busy machine)."""

    def __init__(self) -> None:
        import ctypes
        import queue
        import threading

        self._libc = ctypes.CDLL(None, use_errno=True)
        self._jobs: queue.Queue = queue.Queue()
        self._own = os.open("/proc/self/ns/ipc", os.O_RDONLY | os.O_CLOEXEC)
        self.broken = False
        threading.Thread(target=self._serve, name="insandbox-ipc-look", daemon=True).start()

    def look(self, pid: int) -> Optional[int]:
        import concurrent.futures

        if self.broken:
            return None
        done: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((pid, done))
        try:
            return done.result(timeout=10)
        except concurrent.futures.TimeoutError:
            return None

    def _serve(self) -> None:
        while True:
            pid, done = self._jobs.get()
            try:
                count = self._count(pid)
                done.set_result(None if self.broken else count)
            except Exception:
                done.set_result(None)

    def _count(self, pid: int) -> Optional[int]:
        try:
            fd = os.open(f"/proc/{pid}/ns/ipc", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            if self._libc.setns(fd, 0x08000000) != 0:  # CLONE_NEWIPC
                return None
        finally:
            os.close(fd)
        try:
            total = 0
            for kind in ("shm", "msg", "sem"):
                text = _read(f"/proc/sysvipc/{kind}")
                if text is None:
                    return None
                total += max(len(text.splitlines()) - 1, 0)
            return total
        finally:
            if self._libc.setns(self._own, 0x08000000) != 0:  # cannot go back: no look of this thread is true
                self.broken = True


_ipc_looker: Optional[_IpcLooker] = None


def sysv_ipc_count(pid: int) -> Optional[int]:
    """System V IPC objects (shared memory, queues, semaphores) in the IPC namespace of process `pid`,
    None where they cannot be read."""
    global _ipc_looker
    if _ipc_looker is None:
        _ipc_looker = _IpcLooker()
    return _ipc_looker.look(pid)


def destroy_sockets(pid: int) -> None:
    """Close every TCP socket of the network namespace of `pid` (TIME_WAIT ones too) from this
    machine: iproute2's `ss -K` (the kernel's SOCK_DESTROY), entered with nsenter (needs root)."""
    ss = _which("ss")
    nsenter = _which("nsenter")
    if ss is None or nsenter is None:
        return
    subprocess.run([nsenter, f"--net=/proc/{pid}/ns/net", "--", ss, "-K", "-t", "-a"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=30)


def _which(tool: str) -> Optional[str]:
    import shutil

    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin:/usr/bin:/bin")


def _cgroup_dirs(pid: int) -> list[Path]:
    """The cgroup folders of process `pid` that this machine shows (the v2 one first, then each v1
    hierarchy's: pids, freezer, memory, cpu, systemd's), never a hierarchy's root."""
    mounts: dict[str, Path] = {}  # "" for v2, else a v1 controller ("pids", "name=systemd")
    for line in (_read("/proc/self/mountinfo") or "").splitlines():
        parts = line.split()
        if "-" not in parts:
            continue
        dash = parts.index("-")
        fstype, point = parts[dash + 1], parts[4]
        if fstype == "cgroup2":
            mounts.setdefault("", Path(point))
        elif fstype == "cgroup" and len(parts) > dash + 3:
            for opt in parts[dash + 3].split(","):
                mounts.setdefault(opt, Path(point))
    out = []
    for line in (_read(f"/proc/{pid}/cgroup") or "").splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, rel = rest.partition(":")
        if not rel.strip("/"):
            continue  # the root: every process of the machine
        if hid == "0" and controllers == "" and "" in mounts:
            out.insert(0, mounts[""] / rel.lstrip("/"))
        else:
            for c in ("pids", "freezer", "memory", "cpu", "name=systemd"):
                if c in controllers.split(",") and c in mounts:
                    out.append(mounts[c] / rel.lstrip("/"))
    return [p for p in out if (p / "cgroup.procs").is_file()]


class Freezer:
    """Stops every process of a cgroup where they are (cgroup v2's cgroup.freeze, v1's freezer), so that a
    kill from this machine is not raced by processes that keep forking."""

    def __init__(self, control: Path, frozen: str, thawed: str):
        self.control, self.frozen, self.thawed = control, frozen, thawed

    @classmethod
    def of(cls, folders: list[Path]) -> Optional[Freezer]:
        for f in folders:
            if (f / "cgroup.freeze").is_file():
                return cls(f / "cgroup.freeze", "1", "0")
            if (f / "freezer.state").is_file():
                return cls(f / "freezer.state", "FROZEN", "THAWED")
        return None

    def set(self, state: str, wait_s: float = 1.0) -> None:
        self.control.write_text(state)
        deadline = time.monotonic() + wait_s
        events = self.control.parent / "cgroup.events"
        while time.monotonic() < deadline:  # freezing takes effect as each task reaches the refrigerator
            if self.control.name == "freezer.state":
                if self.control.read_text().strip() == state:
                    return
            elif f"frozen {state}" in (_read(str(events)) or f"frozen {state}"):
                return
            time.sleep(0.002)


def _pid_namespace(pid: int) -> Optional[str]:
    """The pid namespace of a process; of one of its threads for a leader that has left."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        pass
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                return os.readlink(f"/proc/{pid}/task/{tid}/ns/pid")
            except OSError:
                continue
    except OSError:
        pass
    return None


class ProcessView:
    """One sandbox's processes as this machine sees them: those in the pid namespace of its first
    process (no process of a sandbox can leave it), found through the sandbox's cgroup where this
    machine can read one, else by looking at every process of the machine. A kill from here reaches
    nothing else."""

    def __init__(self, init_pid: int, pid_namespace: str, procs_file: Optional[Path] = None,
                 freezer: Optional[Freezer] = None):
        self.init_pid = init_pid
        self.pid_namespace = pid_namespace
        self.procs_file = procs_file  # None: every process of the machine is looked at
        self.freezer = freezer

    @classmethod
    def find(cls, init_pid: int, cgroup_only: bool = True) -> Optional[ProcessView]:
        """The view of the sandbox whose first process is `init_pid` (this machine's number). None where
        that process shares this one's pid namespace, or (cgroup_only) no cgroup of its own shows it."""
        ns = _pid_namespace(init_pid)
        if ns is None or ns == _pid_namespace(os.getpid()):
            return None
        own = set(_cgroup_dirs(os.getpid()))
        folders = [f for f in _cgroup_dirs(init_pid) if f not in own]
        for folder in folders:
            listed = read_pids(str(folder / "cgroup.procs"))
            if listed is not None and init_pid in listed:
                return cls(init_pid, ns, folder / "cgroup.procs", Freezer.of(folders))
        return None if cgroup_only else cls(init_pid, ns)

    def pids(self) -> Optional[set[int]]:
        """The sandbox's processes now (this machine's numbers), None where they cannot be read."""
        if self.procs_file is not None:
            listed = read_pids(str(self.procs_file))
        else:
            try:
                listed = {int(d) for d in os.listdir("/proc") if d.isdigit()}
            except OSError:
                listed = None
        if listed is None:
            return None
        out = set()
        for pid in listed:
            if _pid_namespace(pid) == self.pid_namespace:
                out.add(pid)
            elif self.procs_file is not None and (t := read_task(pid)) is not None and t.running \
                    and _pid_namespace(pid) is None:
                return None  # in the sandbox's cgroup, alive, yet of no namespace this machine can read
        return out

    def others(self) -> Optional[set[int]]:
        """Every process of the sandbox but its first, still running."""
        pids = self.pids()
        if pids is None:
            return None
        return {p for p in pids - {self.init_pid} if (t := read_task(p)) is not None and t.running}

    def kill_until_gone(self, pids: set[int], wait_s: float = 2.0, everything_else: bool = False) -> set[int]:
        """SIGKILL `pids` from this machine until none runs or wait_s passed; returns those left.
        everything_else: every process of the sandbox but its first is to go (a reset), including those
        forked meanwhile: the cgroup is frozen while they are killed, so none can fork again."""
        if everything_else and self.freezer is not None:
            try:
                self.freezer.set(self.freezer.frozen)
                kill(self.others_listed())
            except OSError:
                pass
            finally:
                try:
                    self.freezer.set(self.freezer.thawed)
                except OSError:
                    pass
            pids = set(pids) | (self.others() or set())
        return wait_gone(self.pids, set(pids), wait_s)

    def others_listed(self) -> set[int]:
        """Every process the cgroup lists but the sandbox's first (frozen ones included)."""
        return (self.pids() or set()) - {self.init_pid}
