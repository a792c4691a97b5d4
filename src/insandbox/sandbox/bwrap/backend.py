"""The bwrap backend: a sandbox without a container engine and without root, for machines where no
Docker runs (a Slurm GPU node). One bubblewrap sandbox per sandbox, the image's files under an overlay
of its own, the same in-sandbox server as the Docker backend's as its PID 1, spoken to over plain pipes.

Life of a sandbox: its folder (launch.Folder: the overlay's upper layer, its /etc files, its owner) ->
the command (launch.py) -> the server's source over stdin -> ready. Commands and small files go to the
server; big files, folders copied in, and anything while the server is busy or gone, on the host side
through the sandbox's root (hostside.py). `close()` ends the server (stdin EOF), kills what is left
and removes the folder and the cgroup. If this process dies, stdin reaches EOF and --die-with-parent
takes the sandbox down with it; `insandbox clean --backend bwrap` removes the folder and the cgroup.

What the host checks from outside once the server answers, refusing the sandbox in one line when one
fails: its init runs under the seccomp filter (seccomp.py: /proc/<pid>/status), with the resource limits
asked for (/proc/<pid>/limits), inside its cgroup with its memory limit (cgroup.py). The cgroup also
gives the host the sandbox's processes (`host_tasks`) and the kernel's OOM kills (`oom_kills_seen`,
each command's `oom_kills`); without one, the processes are found by their pid namespace.

What it cannot do, it declares (Capabilities) and the rest of insandbox refuses in one line or does
another way: no recycling (the pool starts fresh sandboxes ahead), no snapshots (no fork), no disk
limit in all (a file is capped at the disk limit), networks `none`, `bridge` (slirp4netns) and `host`
only (network.py).
"""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import ClassVar, Optional

from ...core import defaults
from .. import admission, rootfs
from ..base import (
    Capabilities,
    CommandResult,
    Leftover,
    Progress,
    Sandbox,
    SandboxBrokenByItself,
    SandboxError,
    SandboxSpec,
    SetupError,
)
from ..channel import STREAM_LIMIT, PipeChannel, ServerSilent, server_source
from ..hostview import ProcessView
from ..owner import owner_label, process_start
from ..servercommands import ServerCommands
from . import cgroup, hostside, launch, seccomp
from . import network as network_mod

NETWORKS = ("none", "bridge", "host")
LIVE: dict[str, BwrapSandbox] = {}  # name -> sandboxes of this process not removed yet
_ROOTFS: dict[tuple[str, str], rootfs.RootFS] = {}  # (image, INSANDBOX_ROOTFS) -> ready to run
_CHECKED: dict[str, str] = {}  # root filesystem -> why sandboxes cannot start here ("" when they can)
_WARNED: set[str] = set()


def _network_refusal(network: str) -> str:
    if network == "bridge":
        why = network_mod.slirp_missing()
        return f"--network bridge needs slirp4netns here: {why}; --network none or host work without it" if why else ""
    if network in NETWORKS:
        return ""
    if network == "registries":
        return ("the bwrap backend cannot --network registries (its allow-list proxy runs on a Docker engine); "
                "--network bridge reaches PyPI without this machine's loopback, --network host reaches all this "
                "machine reaches")
    return f"the bwrap backend cannot --network {network}: it knows none, bridge and host"


def _cgroup_places(limits) -> dict[str, cgroup.Place]:
    """Where this sandbox's cgroup goes ({} for none); SetupError where --memory must have one and cannot."""
    try:
        mode = cgroup.mode()
    except ValueError as e:
        raise SetupError(str(e)) from None
    if mode == "rlimit":
        return {}
    found, why = cgroup.places()
    if mode == "cgroup" and limits.memory and "memory" not in found:
        raise SetupError(f"--memory {limits.memory} needs a cgroup ({cgroup.MODE_ENV}=cgroup) and this user may write "
                         f"none here: {why}")
    return found


def find_rootfs(image: str, on_status: Progress = lambda text: None) -> rootfs.RootFS:
    """The root filesystem a sandbox of `image` runs (rootfs.py says where it comes from), once per process."""
    key = (image, os.environ.get(rootfs.ROOTFS_ENV, ""))
    if key in _ROOTFS:
        return _ROOTFS[key]
    found = rootfs.from_setting(on_status)
    if found is None:
        found = _from_docker(image, on_status) or rootfs.cached(image)
    if found is None:
        raise SetupError(f"no root filesystem for image {image!r}: export it where Docker runs (insandbox image "
                         f"export --image {image} --out rootfs.tar) and set {rootfs.ROOTFS_ENV}=rootfs.tar here")
    _ROOTFS[key] = found
    return found


def _from_docker(image: str, on_status: Progress) -> Optional[rootfs.RootFS]:
    """The image's files from a Docker engine on this machine (exported once into the cache), or None
    where no engine answers or it has no such image."""
    from .. import backend_class

    try:
        docker = backend_class("docker")
        image_id = docker.image_id(image)
    except Exception:  # no engine here (or no SDK): the cache, or INSANDBOX_ROOTFS, must do
        return None
    if image_id is None:
        return None
    return rootfs.for_image(image, image_id, lambda tree: docker.export_root_tree(image, tree), on_status)


def check_host(fs: rootfs.RootFS) -> str:
    """Why sandboxes cannot start here ("" when they can): a tiny sandbox of the root filesystem runs
    `true` through the whole chain (user namespace, overlay, bwrap), once per process."""
    if str(fs.tree) in _CHECKED:
        return _CHECKED[str(fs.tree)]
    why = seccomp.unsupported() or launch.tools_missing() or hostside.why_unavailable()
    if not why:
        why = _probe(fs)
    _CHECKED[str(fs.tree)] = why
    return why


def _probe(fs: rootfs.RootFS) -> str:
    from ..base import SandboxLimits

    folder = launch.Folder(f"probe-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    filter_fd = None
    try:
        folder.create(owner_label(), "none")
        filter_fd = seccomp.pipe_with(seccomp.program())
        argv = launch.command(fs, folder, SandboxLimits(memory=None, cpus=None, pids=None, network="none", disk=None),
                              {"PATH": rootfs.DEFAULT_PATH}, "/", info_fd=2, seccomp_fd=filter_fd, program=["true"])
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True, timeout=60, pass_fds=(filter_fd,))
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        return str(e)
    finally:
        if filter_fd is not None:
            os.close(filter_fd)
        folder.remove()
    if r.returncode == 0:
        return ""
    err = " ".join(line for line in r.stderr.splitlines() if not line.lstrip().startswith(('{', '}', '"')))
    err = " ".join(err.split())[-300:] or f"exit code {r.returncode}"
    if r.returncode == 125:
        return f"overlayfs cannot be mounted in a user namespace here (Linux 5.11 or newer needed): {err}"
    if r.returncode == 124:
        return f"sysfs cannot be mounted in a network namespace of this user's here: {err}"
    return err


class BwrapSandbox(hostside.HostSideFiles, ServerCommands, Sandbox):
    backend: ClassVar[str] = "bwrap"
    # cpus: held by the sandbox's cgroup where this user may make one (limits_held says), else not
    capabilities: ClassVar[Capabilities] = Capabilities(
        recycle=False, snapshot=False, disk_limit=False, network_modes=NETWORKS, named_networks=False,
        limits=("memory", "pids"))

    def __init__(self, spec: SandboxSpec):
        super().__init__(spec)
        self.name = f"insandbox-{spec.run_id or 'x'}-{uuid.uuid4().hex[:6]}"
        self.folder: Optional[launch.Folder] = None
        self.proc: Optional[asyncio.subprocess.Process] = None
        self.channel: Optional[PipeChannel] = None
        self.child_pid: Optional[int] = None  # the server, as this host numbers it
        self.server_info: dict = {}
        self.timings: dict[str, float] = {}
        self.rootfs: Optional[rootfs.RootFS] = None
        self._rootfd: Optional[int] = None  # the sandbox's root, held open (hostside.py)
        self._closed = False
        self._slot: Optional[admission.Slot] = None
        self.slirp: Optional[network_mod.Slirp] = None  # --network bridge's way out
        self._host_view: Optional[ProcessView] = None  # its processes as this machine sees them
        self.group: Optional[cgroup.Group] = None  # its cgroup, where this user may make one

    # ------------------------------------------------------------------ the backend
    @classmethod
    def refusal(cls, spec: SandboxSpec) -> str:
        """Its own words for a network it cannot have (what to use instead); a disk limit is held per file
        (prepare warns), cpus where it has a cgroup."""
        lim = spec.limits
        why = _network_refusal(lim.network)
        if not why and lim.runtime:
            why = f"the bwrap backend has no OCI runtimes (--runtime {lim.runtime})"
        return why

    @classmethod
    async def prepare(cls, spec: SandboxSpec, on_status: Progress = lambda text: None,
                      on_progress: Progress = lambda text: None) -> None:
        """The network mode is one this backend has (and can have here), the root filesystem is there
        (exported or unpacked once), and a sandbox can start on this host."""
        lim = spec.limits
        why = cls.refusal(spec)
        if why:
            raise SetupError(why)
        _cgroup_places(lim)  # --memory refused here when it must have a cgroup and cannot
        fs = await asyncio.to_thread(find_rootfs, spec.image, on_status)
        why = await asyncio.to_thread(check_host, fs)
        if why:
            raise SetupError(f"bwrap sandboxes cannot start on this machine: {why}")
        if lim.disk and "disk" not in _WARNED:
            _WARNED.add("disk")
            on_status(f"warning: sandboxes get no disk limit: the bwrap backend keeps a sandbox's writes in a folder "
                      f"of this machine ({launch.root()}); each file is capped at {lim.disk}, not their total")

    @classmethod
    def clean(cls, everything: bool = False, dry_run: bool = False) -> list[Leftover]:
        """Sandbox folders of this user whose owner process is gone (every one, with everything); a
        sandbox still running from one (`--all`) is killed first."""
        removed = []
        for path, owner, process in launch.folders():
            reason = launch.leftover_reason(owner, everything)
            if not reason:
                continue
            running = _bwrap_alive(process)
            if not dry_run:
                if running:
                    _kill(running)
                    for _ in range(50):  # its sandbox goes with it (--die-with-parent): let it stop writing
                        if _bwrap_alive(process) is None:
                            break
                        time.sleep(0.05)
                if cgroup.leftover(launch.cgroups_of(path)):
                    continue  # a process of it still there: the folder stays, with what names its cgroup
                rootfs.remove_tree(path)
            run_id = path.name.removeprefix("insandbox-").rpartition("-")[0]  # insandbox-<run id>-<6 hex>
            removed.append(Leftover(id=path.name, name=str(path), run_id=run_id, reason=reason,
                                    status="running" if running else "folder"))
        return removed

    @classmethod
    async def reachable(cls, timeout: float = 10.0) -> bool:
        return launch.tools_missing() is None  # no engine that could be away

    @classmethod
    def kill_all_now(cls) -> None:
        for sb in list(LIVE.values()):
            if sb.proc is not None and sb.proc.returncode is None:
                _kill(sb.proc.pid)
            if sb.slirp is not None:
                sb.slirp.kill()
            gone = sb.group.remove(0.5) if sb.group is not None else True
            if sb.folder is not None and gone:  # else it stays for `clean`, which names the cgroup from it
                sb.folder.remove()
            LIVE.pop(sb.name, None)

    # ------------------------------------------------------------------ lifetime
    async def start(self) -> None:
        # room on the host as for any sandbox; "none": no Docker bridge's ports are taken, whatever the mode
        door = self.spec.admission or admission.gate()  # the session's, else the process's gate
        # its processes and threads are this machine's (RLIMIT_NPROC holds them at --pids-limit)
        await door.start("none", self._start_once, self._fresh_attempt, tasks=self.spec.limits.pids or 0)

    def _fresh_attempt(self) -> None:
        self.name = f"insandbox-{self.spec.run_id or 'x'}-{uuid.uuid4().hex[:6]}"
        self.folder, self.proc, self.channel, self.child_pid, self._closed = None, None, None, None, False
        self.slirp, self.group = None, None

    async def _start_once(self, slot: admission.Slot) -> None:
        self._slot = slot
        lim = self.spec.limits
        why = _network_refusal(lim.network)
        if why:
            raise SetupError(why)
        try:
            places = _cgroup_places(lim)
            self.rootfs = await asyncio.to_thread(find_rootfs, self.spec.image)
            t0 = time.perf_counter()
            self.folder = launch.Folder(self.name)
            await asyncio.to_thread(self.folder.create, owner_label(), lim.network)
            LIVE[self.name] = self
            if places:
                try:
                    self.group = cgroup.Group.make(self.name, places, lim.memory_bytes, lim.pids, lim.cpus)
                except OSError as e:
                    raise SetupError(f"could not make the sandbox's cgroup: {e}") from None
                self.folder.note_cgroups(self.group.paths)
            env = launch.environment(self.rootfs, self.spec.env)
            workdir = self.spec.workdir or self.rootfs.workdir or "/"
            filter_r = seccomp.pipe_with(seccomp.program())
            info_r, info_w = os.pipe()
            try:
                argv = launch.command(self.rootfs, self.folder, lim, env, workdir, info_w, filter_r, self.group)
                self.proc = await asyncio.create_subprocess_exec(
                    *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE, pass_fds=(info_w, filter_r), limit=STREAM_LIMIT,
                    start_new_session=True)  # Ctrl-C at the terminal is ours to handle, not the sandbox's
            finally:
                os.close(info_w)
                os.close(filter_r)
            self.folder.note_process(self.proc.pid, process_start(self.proc.pid))
            self.channel = PipeChannel(self.proc.stdin, self.proc.stdout, self.proc.stderr, self.name)
            t1 = time.perf_counter()
            self.child_pid = await self._child_pid(info_r)
            self.server_info = await self.channel.handshake(server_source())
            why = self._refusal()
            if why:
                raise SandboxError(f"sandbox {self.name} refused: {why}")
            if lim.network == "bridge":  # once bwrap is done with the namespace (it sets up loopback), before
                self.slirp = network_mod.Slirp()  # any command
                await self.slirp.start(self.child_pid)
            # only now: bwrap reports the pid before the sandbox's root is in place
            self._rootfd = os.open(f"/proc/{self.child_pid}/root", hostside.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except BaseException:
            await self.close()
            raise
        self.timings.update(create_s=t1 - t0, ready_s=time.perf_counter() - t1)
        self.uses = 1

    def _refusal(self) -> str:
        """Why the started sandbox is not the one asked for, read from outside ("" when it is): the
        server answered, so its init runs what it was given, after bwrap set everything up."""
        pid = self.child_pid
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            limits_text = Path(f"/proc/{pid}/limits").read_text()
        except OSError as e:
            return f"its init cannot be read from outside ({e.strerror})"
        why = seccomp.refusal(status, Path("/proc/self/status").read_text())
        if why:
            return why
        lim = self.spec.limits
        why = launch.limits_refusal(limits_text, launch.rlimits(lim, bool(self.group and self.group.holds("memory"))))
        if why or self.group is None:
            return why
        why = self.group.member(pid)
        if not why and lim.memory_bytes and self.group.memory_limit() != lim.memory_bytes:
            why = f"its cgroup's memory limit reads {self.group.memory_limit()}, not {lim.memory_bytes}"
        return why

    # ------------------------------------------------------------------ facts read from outside
    def host_tasks(self) -> list[int]:
        """The host's pids of the sandbox's processes (its pid namespace), read from outside: from its
        cgroup where it has one, else from every process of this host."""
        view = self._view()
        return sorted(view.pids() or ()) if view is not None else []

    def _view(self) -> Optional[ProcessView]:
        if self.child_pid is None:
            return None
        if self._host_view is None or self._host_view.init_pid != self.child_pid:
            ns = _pid_ns(self.child_pid)
            if ns is None:
                return None
            procs = Path(self.group.procs_files()[0]) if self.group is not None and self.group.paths else None
            self._host_view = ProcessView(self.child_pid, ns, procs)
        return self._host_view

    async def _process_view(self) -> Optional[ProcessView]:
        """For a timed-out command, what ServerCommands checks from this machine (hostview.py)."""
        return self._view()

    def oom_kills_seen(self) -> Optional[int]:
        """Processes the kernel killed in the sandbox for its memory limit so far (its cgroup's count),
        None without a cgroup (RLIMIT_AS makes allocations fail instead)."""
        return self.group.oom_kills() if self.group is not None else None

    async def run(self, command: str, timeout: float = defaults.COMMAND_TIMEOUT_S) -> CommandResult:
        before = self.oom_kills_seen()
        result = await super().run(command, timeout)
        after = self.oom_kills_seen()
        if before is not None and after is not None:
            result.oom_kills = after - before  # the host's count, not the server's word
        return result

    async def _child_pid(self, info_r: int) -> int:
        """bwrap's --info-fd: the sandbox's init as this host numbers it (EOF without it: bwrap failed)."""
        def read() -> bytes:
            data = b""
            while chunk := os.read(info_r, 4096):
                data += chunk
            return data

        import json

        try:
            raw = await asyncio.wait_for(asyncio.to_thread(read), 60.0)
        except asyncio.TimeoutError:
            raise SandboxError(f"sandbox {self.name}: bwrap did not start within 60 s") from None
        finally:
            os.close(info_r)
        try:
            return int(json.loads(raw)["child-pid"])
        except (ValueError, KeyError):
            await asyncio.sleep(0.2)  # what it said on stderr arrives meanwhile
            rc = self.proc.returncode if self.proc else None
            raise SandboxError(f"could not start the sandbox (exit code {rc}): "
                               f"{self.channel.stderr_text() if self.channel else ''}") from None

    def limits_held(self) -> dict:
        """What holds each limit of this sandbox (None: not held)."""
        lim, g = self.spec.limits, self.group or cgroup.Group()
        nproc = "RLIMIT_NPROC (the sandbox's processes and threads)"
        held = {"pids": None, "memory": None, "disk": "RLIMIT_FSIZE, per file" if lim.disk else None, "cpus": None}
        if lim.pids:
            held["pids"] = f"{g.describe('pids')} and {nproc}" if g.holds("pids") else nproc
        if lim.memory:
            held["memory"] = (f"{g.describe('memory')} (the sandbox in all), RLIMIT_DATA per process"
                              if g.holds("memory") else
                              "RLIMIT_AS, per process (address space: shared mappings count; not the sandbox in all)")
        if lim.cpus and g.holds("cpu"):
            held["cpus"] = g.describe("cpu")
        return held

    def info(self) -> dict:
        lim = self.spec.limits
        return {"backend": self.backend, "image": self.spec.image, "name": self.name,
                "folder": str(self.folder.path) if self.folder else None, "limits": vars(lim).copy(),
                "limits_held": self.limits_held(),
                "cgroup": [str(p) for p in self.group.paths] if self.group else None,
                "disk_limit": None, **(self.rootfs.info() if self.rootfs else {}),
                "timings": dict(self.timings), "server_info": dict(self.server_info)}

    @property
    def alive(self) -> bool:
        return self._channel_alive() and not self._closed

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._slot is not None:
            self._slot.release()
        removing = asyncio.ensure_future(self._remove())
        try:
            await asyncio.shield(removing)
        except asyncio.CancelledError:
            await asyncio.wait([removing])  # Ctrl-C while removing: finish first
            raise

    async def _remove(self) -> None:
        if self.channel is not None:
            await self.channel.close()  # stdin EOF: the server ends everything in the sandbox
        if self.proc is not None and self.proc.returncode is None:
            try:
                await asyncio.wait_for(self.proc.wait(), 2.0)
            except asyncio.TimeoutError:
                _kill(self.proc.pid)
                await self.proc.wait()
        if self.slirp is not None:
            await asyncio.to_thread(self.slirp.stop)
        if self._rootfd is not None:
            os.close(self._rootfd)
            self._rootfd = None
        kept = self.group is not None and not await asyncio.to_thread(self.group.remove)
        if self.folder is not None and not kept:  # else it stays for `clean`, which names the cgroup from it
            await asyncio.to_thread(self.folder.remove)
        LIVE.pop(self.name, None)

    def _root_fd(self) -> Optional[int]:
        return self._rootfd

    def _channel_alive(self) -> bool:
        return self.channel is not None and not self.channel.closed_reason

    def _channel_free(self) -> bool:
        return self._channel_alive() and not self.channel.busy

    async def _request(self, op: str, wait_s: float, **fields) -> dict:
        if self.channel is None:
            raise SandboxError("sandbox not started")
        try:
            return await self.channel.request(op, wait_s, **fields)
        except SandboxError as e:
            if self.channel.closed_reason or isinstance(e, ServerSilent):
                why, by_itself = await self._dead_reason()
                raise (SandboxBrokenByItself if by_itself else SandboxError)(f"{e} ({why})") from None
            raise

    async def _dead_reason(self) -> tuple[str, bool]:
        """Why the sandbox stopped answering, and whether it did so itself. Not its own doing needs
        evidence from outside it: this process closed it, or its bwrap process (outside the sandbox's
        namespaces, out of its reach) was killed by a signal from this machine. Anything else (its first
        process died, of its memory limit or of what it did to it; a server that no longer answers) is
        the sandbox's."""
        if self._closed:
            return "the sandbox was being closed", False
        if self.proc is not None and self.proc.returncode is None and self.channel is not None \
                and self.channel.closed_reason:
            try:  # the channel ends a moment before bwrap reports the sandbox's end
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), 2.0)
            except asyncio.TimeoutError:
                pass
        rc = self.proc.returncode if self.proc else None
        if rc is not None and rc < 0:
            return f"its bwrap process was killed from outside the sandbox (signal {-rc})", False
        killed = self.oom_kills_seen()
        oom = f"; {killed} process(es) killed for its memory limit" if killed else ""
        if rc is None:
            return f"its server stopped answering (what ran in it did so: nothing outside it did){oom}", True
        return f"bwrap exit code {rc}: its first process ended{oom}; nothing outside it stopped it", True


def _bwrap_alive(process: str) -> Optional[int]:
    """The pid of a sandbox's bwrap process ("pid:start") while that very process lives, else None."""
    pid, _, start = process.partition(":")
    if not pid.isdigit():
        return None
    if process_start(int(pid)) != start or not start:
        return None
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    return int(pid) if comm == "bwrap" else None


def _pid_ns(pid: int) -> Optional[str]:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _kill(pid: int) -> None:
    """SIGKILL to bwrap: with --die-with-parent, its sandbox goes with it."""
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass

