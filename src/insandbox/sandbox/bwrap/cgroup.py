"""A bwrap sandbox's own cgroup, where this user may make one: its memory limit in all (shared mappings,
tmpfs and page cache included, which no rlimit counts), its processes, its CPU quota, and facts the
host reads from outside (its processes, the kernel's OOM kills).

Where: under the cgroup this process runs in, so a Slurm job's limits still bound its sandboxes.
- cgroup v2 (a controller in the unified hierarchy): the nearest ancestor of this process's cgroup
  that this user may write (mkdir, cgroup.procs, cgroup.subtree_control) and whose subtree can have
  the controller: a delegated subtree (a systemd user manager's, a container's whole tree as root);
  not this process's own cgroup, which holds processes and so cannot enable controllers below it;
- cgroup v1: this process's own cgroup of each hierarchy, where this user may write it (root).
Each controller is found on its own (v1 hierarchies differ); the sandbox's group is named as the
sandbox (insandbox-<run id>-<6 hex>) in each. The launcher (launch.py) writes its own pid into the
group's cgroup.procs before it starts anything else, so bwrap and every process of the sandbox are
inside from the first fork on.

INSANDBOX_BWRAP_MEMORY: `cgroup` refuses --memory where no memory cgroup is writable; `rlimit` never
makes a cgroup (RLIMIT_AS holds memory, RLIMIT_NPROC processes, CPUs are not held); unset: a cgroup
where one is writable, else the rlimits.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

MODE_ENV = "INSANDBOX_BWRAP_MEMORY"
MODES = ("", "auto", "cgroup", "rlimit")
CONTROLLERS = ("memory", "pids", "cpu")
PREFIX = "insandbox-"
CPU_PERIOD_US = 100_000
HOST_TASKS = 4  # pids the sandbox's group holds outside the sandbox's own count (bwrap's processes)


def mode() -> str:
    value = os.environ.get(MODE_ENV, "").strip().lower()
    if value not in MODES:
        raise ValueError(f"{MODE_ENV}={value!r}: use cgroup (refuse --memory without a cgroup), rlimit (never a "
                         f"cgroup) or leave it unset")
    return value or "auto"


@dataclass(frozen=True)
class Place:
    """Where sandbox groups of one controller are made: `parent` (a directory of a cgroup hierarchy)."""

    version: int
    parent: Path


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _mounts(mountinfo: str) -> list[tuple[str, str, str, set[str]]]:
    """(fs type, mount root, mount point, super options) of the cgroup mounts in a mountinfo text."""
    out = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        a, b = left.split(), right.split()
        if len(a) >= 5 and len(b) >= 3 and b[0] in ("cgroup", "cgroup2"):
            out.append((b[0], a[3], a[4].replace("\\040", " "), set(b[2].split(","))))
    return out


def _inside(mount_point: str, mount_root: str, path: str) -> Optional[Path]:
    """The directory of cgroup `path` under a mount of the hierarchy rooted at `mount_root`."""
    root = mount_root.rstrip("/")
    if path != root and not path.startswith(root + "/") and root:
        return None  # this process's cgroup is outside what that mount shows
    return Path(mount_point) / path[len(root):].lstrip("/")


def _writable(d: Path) -> bool:
    return os.access(d, os.W_OK | os.X_OK) and os.access(d / "cgroup.procs", os.W_OK)


_FOUND: dict[str, tuple[dict[str, Place], str]] = {}  # this process's cgroups -> places(), found once


def places(mountinfo: Optional[str] = None, own: Optional[str] = None) -> tuple[dict[str, Place], str]:
    """{controller: where its sandbox groups go} for the controllers this user may use, and why the
    missing ones are missing (the texts default to this process's /proc/self/mountinfo and cgroup; then
    the answer is kept while this process stays in the same cgroups)."""
    if mountinfo is None and own is None:
        own = _read(Path("/proc/self/cgroup"))
        if own not in _FOUND:
            _FOUND[own] = places(_read(Path("/proc/self/mountinfo")), own)
        return _FOUND[own]
    mountinfo = _read(Path("/proc/self/mountinfo")) if mountinfo is None else mountinfo
    own = _read(Path("/proc/self/cgroup")) if own is None else own
    v1_paths, v2_path = {}, None
    for line in own.splitlines():
        num, _, rest = line.partition(":")
        names, _, path = rest.partition(":")
        if num == "0" and not names:
            v2_path = path
        for name in names.split(","):
            if name:
                v1_paths[name] = path
    found: dict[str, Place] = {}
    why = []
    for fstype, root, point, opts in _mounts(mountinfo):
        if fstype == "cgroup2" and v2_path is not None:
            # a process is in one v2 cgroup only: one parent for every controller, the first one's (memory)
            have = [c for c in CONTROLLERS if c in _read(Path(point) / "cgroup.controllers").split()]
            parent = None
            for name in have:
                if parent is None:
                    parent = _v2_parent(Path(point), _inside(point, root, v2_path), name)
                    if parent is None:
                        why.append(f"no cgroup v2 subtree this user may write has {name}")
                if parent is not None and _v2_usable(parent, Path(point), name) and name not in found:
                    found[name] = Place(2, parent)
        elif fstype == "cgroup":
            for name in CONTROLLERS:
                if name in opts and name not in found and name in v1_paths:
                    d = _inside(point, root, v1_paths[name])
                    if d is not None and _writable(d):
                        found[name] = Place(1, d)
                    elif d is not None:
                        why.append(f"{d} is not writable by this user")
    if "memory" not in found and not why:
        why.append("no cgroup hierarchy with the memory controller is mounted")
    return found, "; ".join(dict.fromkeys(why))


def _v2_parent(top: Path, own: Optional[Path], controller: str) -> Optional[Path]:
    """The nearest ancestor of this process's cgroup (itself only when it is the root) where this user
    may make a group with the controller."""
    if own is None:
        return None
    candidates = [own] if own == top else []
    d = own
    while d != top and top in d.parents:
        d = d.parent
        candidates.append(d)
    for d in candidates:
        if _writable(d) and os.access(d / "cgroup.subtree_control", os.W_OK) and _v2_usable(d, top, controller):
            return d
    return None


def _v2_usable(d: Path, top: Path, controller: str) -> bool:
    """Whether groups below `d` can have the controller: enabled there, or to be enabled (no process of
    d's own in the way, but at the root)."""
    if controller in _read(d / "cgroup.subtree_control").split():
        return True
    empty = d == top or not _read(d / "cgroup.procs").strip()
    return controller in _read(d / "cgroup.controllers").split() and empty


@dataclass
class Group:
    """One sandbox's group: a directory per hierarchy it is made in (v2: one for all its controllers)."""

    dirs: dict[str, Path] = field(default_factory=dict)  # controller -> its directory
    versions: dict[str, int] = field(default_factory=dict)
    _oom_fd: Optional[int] = field(default=None, repr=False)  # the OOM counter, read twice a command

    @property
    def paths(self) -> list[Path]:
        return list(dict.fromkeys(self.dirs.values()))

    def holds(self, controller: str) -> bool:
        return controller in self.dirs

    def describe(self, controller: str) -> str:
        v = self.versions[controller]
        return {("memory", 1): "cgroup v1 memory.limit_in_bytes and memory.memsw.limit_in_bytes",
                ("memory", 2): "cgroup v2 memory.max, memory.swap.max 0",
                ("pids", 1): "cgroup v1 pids.max", ("pids", 2): "cgroup v2 pids.max",
                ("cpu", 1): "cgroup v1 cpu.cfs_quota_us", ("cpu", 2): "cgroup v2 cpu.max"}[(controller, v)]

    # ------------------------------------------------------------------ made and removed
    @classmethod
    def make(cls, name: str, found: dict[str, Place], memory: Optional[int], pids: Optional[int],
             cpus: Optional[float]) -> Group:
        """The group `name` in each place, its limits written; partly made ones are removed on failure."""
        group = cls()
        wanted = {"memory": memory, "pids": pids, "cpu": cpus}
        try:
            for controller, place in found.items():
                if not wanted.get(controller) and controller != "memory":
                    continue  # the memory group is made even without a limit: the host reads OOM kills and tasks
                d = place.parent / (name if name.startswith(PREFIX) else PREFIX + name)
                if place.version == 2:
                    enabled = _read(place.parent / "cgroup.subtree_control").split()
                    if controller not in enabled:
                        (place.parent / "cgroup.subtree_control").write_text(f"+{controller}")
                if d not in group.paths:
                    d.mkdir()
                group.dirs[controller] = d
                group.versions[controller] = place.version
                _limit(d, place.version, controller, wanted[controller])
        except OSError:
            group.remove(0.0)
            raise
        return group

    def remove(self, wait_s: float = 2.0) -> bool:
        """Kill what is left inside, then remove the directories; False when one stays (still busy)."""
        if self._oom_fd is not None:
            os.close(self._oom_fd)
            self._oom_fd = None
        deadline = time.monotonic() + wait_s
        gone = True
        for d in self.paths:
            if not d.exists():
                continue
            self.kill(d)
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        gone = False
                        break
                    self.kill(d)
                    time.sleep(0.01)
        return gone

    @staticmethod
    def kill(d: Path) -> None:
        if (d / "cgroup.kill").exists():
            try:
                (d / "cgroup.kill").write_text("1")
                return
            except OSError:
                pass
        for pid in _pids(d):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    # ------------------------------------------------------------------ read from outside
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.paths]

    def tasks(self) -> list[int]:
        """The host pids in the group (any of its directories: every one holds the same processes)."""
        return _pids(self.paths[0]) if self.paths else []

    def oom_kills(self) -> Optional[int]:
        """How many processes the kernel killed in the group for its memory limit, None without one."""
        d = self.dirs.get("memory")
        if d is None:
            return None
        try:
            if self._oom_fd is None:
                name = "memory.events" if self.versions["memory"] == 2 else "memory.oom_control"
                self._oom_fd = os.open(d / name, os.O_RDONLY | os.O_CLOEXEC)
            text = os.pread(self._oom_fd, 4096, 0).decode()  # 2 us, where opening the file costs 100
        except OSError:
            return None
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return None

    def memory_limit(self) -> Optional[int]:
        d = self.dirs.get("memory")
        if d is None:
            return None
        text = _read(d / ("memory.max" if self.versions["memory"] == 2 else "memory.limit_in_bytes")).strip()
        return int(text) if text.isdigit() else None

    def member(self, pid: int) -> str:
        """Why host process `pid` is not in every directory of the group ("" when it is)."""
        for d in self.paths:
            if pid not in _pids(d):
                return f"process {pid} is not in {d}"
        return ""


def _limit(d: Path, version: int, controller: str, value) -> None:
    if not value:
        return
    if controller == "memory":
        if version == 2:
            (d / "memory.max").write_text(str(value))
            if (d / "memory.swap.max").exists():
                (d / "memory.swap.max").write_text("0")  # no swap on top, as the Docker backend
        else:
            (d / "memory.limit_in_bytes").write_text(str(value))
            if (d / "memory.memsw.limit_in_bytes").exists():
                (d / "memory.memsw.limit_in_bytes").write_text(str(value))
    elif controller == "pids":
        (d / "pids.max").write_text(str(int(value) + HOST_TASKS))
    elif controller == "cpu":
        quota = max(1000, int(float(value) * CPU_PERIOD_US))
        if version == 2:
            (d / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
        else:
            (d / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
            (d / "cpu.cfs_quota_us").write_text(str(quota))


def _pids(d: Path) -> list[int]:
    return [int(p) for p in _read(d / "cgroup.procs").split() if p.isdigit()]


def leftover(paths: list[str]) -> list[str]:
    """Remove the groups a sandbox's folder names (`clean`); the ones that stay."""
    group = Group({str(i): Path(p) for i, p in enumerate(paths) if Path(p).name.startswith(PREFIX)})
    group.remove()
    return [str(p) for p in group.paths if p.exists()]
