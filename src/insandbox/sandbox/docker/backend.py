"""Docker backend: one container per sandbox, the in-container server as its PID 1.

Life of a sandbox: create the container (labelled with the run id and the owning
process) -> open the attach stream -> start -> hand the server its source -> ready.
Commands go over the attach stream; small files through the server, big ones and
directory trees through the engine's archive API; `close()` removes the container with
`rm -f` (no 10 s stop grace: nothing inside needs a clean shutdown). If this process
dies without closing, the container's stdin reaches EOF, the server exits at once and
the container stops; `insandbox clean` removes what is left.

Helpers of this backend: image.py (building the image), cleanup.py (finding leftovers),
channel.py (the attach stream), ../guest/ (what runs inside), proxy.py (the allow-list proxy
of `--network registries`).
"""
from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import ClassVar, Optional

from .. import admission, resetcheck
from ..base import (
    Capabilities,
    Leftover,
    Progress,
    Sandbox,
    SandboxBrokenByItself,
    SandboxError,
    SandboxSpec,
    SetupError,
)
from ..channel import ServerSilent, server_source
from ..guest import protocol
from ..guest.protocol import BOOTSTRAP
from ..hostview import ProcessView
from ..servercommands import ServerCommands
from . import engine, etc_files, events, limits, netfilter, runtimes
from .channel import Channel, listen
from .files import DockerFiles
from .host import EngineHost
from .image import ImageNotFound
from .labels import LABEL, LABEL_CREATED, LABEL_OWNER, LABEL_RUN, owner_label, process_start  # noqa: F401

BUILTIN_NETWORKS = ("bridge", "none", "host")
REGISTRIES = "registries"  # our own mode: package registries only, through proxy.py


_WARNED: dict[str, bool] = {}  # docker host -> the missing disk limit was reported
LIVE: dict[str, str] = {}  # container id -> name, of sandboxes this process has not removed yet
UNREMOVED: dict[str, str] = {}  # container id -> name, of those whose removal failed (the engine was away)


CHANNEL_ENV = "INSANDBOX_CHANNEL"  # "attach": requests over the engine's attach stream, not the direct socket
UNISOLATED_ENV = "INSANDBOX_UNISOLATED_ENGINE"  # "1": run on an engine where sandboxes cannot be kept apart


def isolation_unavailable(network: str) -> str:
    """Why sandboxes in this network mode could not be kept apart from each other and from the
    engine's files here ("" when they can): fail closed, unless the user said they accept it."""
    if os.environ.get(UNISOLATED_ENV) == "1":
        return ""
    if not engine.is_local():
        return (f"the Docker engine at {engine.docker_host()} is not on this machine: a sandbox's /etc files and "
                f"packet filter are set from the engine's host. Run insandbox there, or set {UNISOLATED_ENV}=1 to "
                "accept sandboxes that can reach each other")
    if network in ("bridge", REGISTRIES):
        why = netfilter.why_unavailable()
        if why:
            return (f"--network {network}: sandboxes could reach each other ({why}). Use --network none, name a "
                    f"Docker network of your own with --network NAME, or set {UNISOLATED_ENV}=1 to accept it")
    return ""


class DockerSandbox(DockerFiles, ServerCommands, Sandbox):
    backend: ClassVar[str] = "docker"
    capabilities: ClassVar[Capabilities] = Capabilities(
        recycle=True, snapshot=True, disk_limit=True, network_modes=("bridge", "none", "host", "registries"),
        named_networks=True, limits=("memory", "cpus", "pids"), runtimes=True, build_images=True)

    def __init__(self, spec: SandboxSpec):
        super().__init__(spec)
        self.container_id: Optional[str] = None
        self.name = f"insandbox-{spec.run_id or 'x'}-{uuid.uuid4().hex[:6]}"
        self.channel: Optional[Channel] = None
        self._listener = None  # the direct channel's socket, from creating the container to starting it
        self.server_info: dict = {}
        self.timings: dict[str, float] = {}
        self.disk_limit: Optional[str] = None  # as enforced (None: none)
        self.network_info: dict = {}  # the registries proxy, in that mode
        self._network_mode, self._env = spec.limits.network, dict(spec.env or {})  # as start() resolves them
        self._closed = False
        self.last_recycle: dict = {}  # what the reset before the current sample did
        self._restorer = None  # recycle.Restorer, made at start when the spec asks for recycling
        self.not_recyclable = ""  # why this container must serve one sample only
        self._runtime: Optional[str] = None  # the engine's name for the runtime (runtimes.resolve)
        self.gvisor = False
        self.isolated = False  # its packet filter keeps it apart from the other sandboxes (netfilter.py)
        self._inspect: dict = {}  # the engine's inspect, right after the start
        self._proxy: Optional[tuple[str, str]] = None  # registries: the proxy's (address, name)
        self._slot: Optional[admission.Slot] = None  # this sandbox's room on the host
        self._view: Optional[ProcessView] = None  # its processes as this machine sees them (hostview.py)
        self._view_looked = False
        self._reset_baseline: Optional[resetcheck.Baseline] = None  # what each reset is checked against
        self._created_at = 0.0  # this machine's time just before the engine created it (events.py)

    # ------------------------------------------------------------------ the backend
    @classmethod
    async def prepare(cls, spec: SandboxSpec, on_status: Progress = lambda text: None,
                      on_progress: Progress = lambda text: None) -> None:
        """The network exists (the registries proxy runs) and the image is there (insandbox:* images
        are built on first use)."""
        from . import image, proxy

        api = await engine.call(engine.api)
        net = spec.limits.network
        why = isolation_unavailable(net) or await engine.call(limits.unenforceable, spec.limits)
        if why:
            raise SetupError(why)
        if net == REGISTRIES:
            endpoints = proxy.allowed_endpoints(hosts=spec.limits.allow_hosts)
            await engine.call(proxy.ensure, on_status, on_progress, endpoints)
        elif net not in BUILTIN_NETWORKS and not net.startswith("container:"):
            found = await engine.call(api.networks, names=[net])
            if not any(n.get("Name") == net for n in found):
                others = [n.get("Name") for n in await engine.call(api.networks)
                          if not (n.get("Labels") or {}).get(proxy.LABEL_PROXY)]  # the proxy's own are internals
                known = sorted({*BUILTIN_NETWORKS, REGISTRIES, *others})
                raise SetupError(f"--network {net!r}: no such Docker network (known: {', '.join(known)})")
        if spec.limits.runtime:
            runtimes.forget()  # a runtime registered since (setup.sh, a SIGHUP'd engine) is seen
            _, gvisor = await engine.call(runtimes.resolve, api, spec.limits.runtime)
            if gvisor and await engine.call(image.image_exists, spec.image):
                labels = ((await engine.call(api.inspect_image, spec.image)).get("Config") or {}).get("Labels") or {}
                if not labels.get(runtimes.SHIM_LABEL):
                    raise SetupError(f"image {spec.image} predates gVisor support (statx shim, /tmp): rebuild it with "
                                     f"`insandbox image build --image {spec.image}`")
        if spec.limits.disk:
            mode, why = await engine.call(limits.disk_mode, api)
            if mode is None and not _WARNED.get(engine.docker_host()):
                _WARNED[engine.docker_host()] = True
                on_status(f"warning: sandboxes get no disk limit: {why}")
        if await engine.call(image.image_exists, spec.image):
            return
        if not spec.build_image or spec.image.split(":")[0] != "insandbox":
            raise ImageNotFound(spec.image)
        on_status(f"image {spec.image} not found: building it (once, a few minutes)")
        info = await engine.call(image.build_image, spec.image, progress=on_progress)
        on_status(f"built {info.tag}: {info.size_bytes / 1e6:,.0f} MB")

    @classmethod
    def clean(cls, everything: bool = False, dry_run: bool = False) -> list[Leftover]:
        from .cleanup import clean

        return clean(everything, dry_run)

    @classmethod
    async def reachable(cls, timeout: float = 10.0) -> bool:
        try:
            await asyncio.wait_for(engine.call(lambda: engine.api().ping()), timeout)
            return True
        except Exception:
            return False

    @classmethod
    async def remove_unremoved(cls) -> list[str]:
        removed = []
        for cid, name in list(UNREMOVED.items()):
            try:
                await engine.call(engine.remove_container, engine.api(), cid)
            except Exception as e:
                if not engine.is_not_found(e):
                    continue
            UNREMOVED.pop(cid, None)
            LIVE.pop(cid, None)
            removed.append(name)
        return removed

    @classmethod
    def kill_all_now(cls) -> None:
        for cid in list(LIVE):
            try:
                engine.remove_container(engine.api(), cid)
            except Exception:
                pass
            LIVE.pop(cid, None)

    # ------------------------------------------------------------------ an image's files, for engine-less backends
    @classmethod
    async def image_config(cls, image: str) -> Optional[dict]:
        from . import userimage

        return await engine.call(userimage.image_config, image)

    @classmethod
    async def build_image(cls, folder: Path, tag: str, timeout_s: float) -> None:
        from . import userimage

        await engine.call(userimage.build_image, folder, tag, timeout_s)

    @classmethod
    def image_id(cls, image: str) -> Optional[str]:
        """The image's id in the engine, None where it is not there; raises when the engine does not answer."""
        from . import export

        return export.image_id(image)

    @classmethod
    def export_root_tree(cls, image: str, tree: Path) -> dict:
        """The image's files unpacked into the folder `tree` (the bwrap backend's cache); returns its image.json."""
        from . import export

        return export.export_tree(image, tree)

    @classmethod
    def export_root_filesystem(cls, image: str, out: Path) -> Path:
        """`insandbox image export --out PATH`: a folder (root/, image.json) or a .tar for INSANDBOX_ROOTFS."""
        from . import export

        return export.export_image(image, out)

    # ------------------------------------------------------------------ lifetime
    async def start(self) -> None:
        """Waits for room on the host first; a start the engine refuses for want of room waits and is
        tried again as a fresh container (admission.py); so is a gVisor sandbox that failed to boot."""
        admission.gate().use_host(EngineHost)  # what the gate checks of this engine's machine
        door = self.spec.admission or admission.gate()  # the session's, else the process's gate
        tasks = 0  # the most tasks of this machine the sandbox may hold (under gVisor, its host tasks)
        if engine.is_local() and self.spec.limits.pids:
            gvisor = False
            if self.spec.limits.runtime:
                _, gvisor = await engine.call(runtimes.resolve, await engine.call(engine.api), self.spec.limits.runtime)
            tasks = limits.host_pids(self.spec.limits, gvisor) or 0
        for tries_left in range(runtimes.BOOT_TRIES - 1, -1, -1):
            try:
                await door.start(self.spec.limits.network, self._start_once, self._fresh_attempt, tasks=tasks)
                return
            except SandboxError as e:
                if not (self.gvisor and tries_left and runtimes.failed_to_boot(str(e))):
                    raise
                self._fresh_attempt()

    def _fresh_attempt(self) -> None:
        etc_files.remove(self.name)
        self.container_id, self.channel, self._closed = None, None, False
        self.name = f"insandbox-{self.spec.run_id or 'x'}-{uuid.uuid4().hex[:6]}"

    async def _start_once(self, slot: admission.Slot) -> None:
        import docker.errors

        self._slot = slot

        api = await engine.call(engine.api)
        lim = self.spec.limits
        network_mode, env = lim.network, dict(self.spec.env or {})
        if lim.network == REGISTRIES:
            from . import proxy

            px = await engine.call(proxy.ensure, endpoints=proxy.allowed_endpoints(hosts=lim.allow_hosts))
            network_mode, env = px.network_id, {**px.env(), **env}
            self.network_info = px.info()
            self._proxy = (px.address, px.name)
        self._runtime, self.gvisor = await engine.call(runtimes.resolve, api, lim.runtime)
        if self.gvisor:  # Debian's runsc refuses a stat flag coreutils passes: the image's shim asks again
            env = {**env, "LD_PRELOAD": runtimes.STATX_SHIM}
        self._network_mode, self._env = network_mode, env
        why = isolation_unavailable(lim.network) or await engine.call(limits.unenforceable, lim)
        if why:
            raise SetupError(why)
        try:
            size = await engine.call(limits.storage_size, api, self.spec.image, lim.disk_bytes)
        except docker.errors.ImageNotFound:
            raise ImageNotFound(self.spec.image) from None
        labels = {LABEL: "1", LABEL_RUN: self.spec.run_id, LABEL_OWNER: owner_label(),
                  LABEL_CREATED: str(int(time.time()))}
        # the engine's account of this container's end must be heard from before it exists (events.py)
        await asyncio.to_thread(events.watcher)
        self._created_at = time.time()
        t0 = time.perf_counter()
        try:
            created = await self._create(api, labels, size)
        except docker.errors.APIError as e:
            if not (size and e.status_code in (400, 500) and limits.is_quota_refusal(str(e.explanation or e))):
                raise
            # the engine's storage cannot cap a container's disk after all: the next best way
            why = f"the engine refused a disk limit ({e.explanation or e})"
            await engine.call(limits.engine_refused_size, api, why)
            created = await self._create(api, labels, None)
        self.container_id = created["Id"]
        LIVE[self.container_id] = self.name
        t1 = time.perf_counter()
        try:
            self.disk_limit = size or await self._own_filesystem(api)
            self.channel = await Channel.attach(engine.docker_host(), api.api_version, self.container_id, self.name)
            prefix = ""
            if self._listener is not None:
                listener, self._listener = self._listener, None
                prefix = self.channel.offer_socket(listener, self._server_pid)
            await engine.call(api.start, self.container_id)
            t2 = time.perf_counter()
            if self.spec.recyclable or lim.network in ("bridge", REGISTRIES) or prefix:  # what they need to know
                self._inspect = await engine.call(api.inspect_container, self.container_id)
            await self._keep_apart()
            self.server_info = await self.channel.handshake(prefix + server_source())
        except docker.errors.APIError as e:
            await self.close()
            raise SandboxError(f"could not start the sandbox container: {e.explanation or e}") from e
        except BaseException:
            await self.close()
            raise
        self.timings.update(create_s=t1 - t0, start_s=t2 - t1, ready_s=time.perf_counter() - t2)
        self.uses = 1
        if self.spec.recyclable:
            await self._keep_for_recycling()

    def _direct_channel_possible(self) -> bool:
        """Requests past the engine (channel.py's direct channel): where the engine runs here (its sandboxes'
        files are ours: etc_files.py) with runc, not gVisor (whose sandboxes reach no host socket), nor Podman;
        INSANDBOX_CHANNEL=attach keeps the attach stream."""
        return os.environ.get(CHANNEL_ENV, "direct") != "attach" and not self.gvisor

    async def _process_view(self) -> Optional[ProcessView]:
        """The container's processes through its cgroup, read on this machine: where the engine runs here
        with runc (gVisor's processes live in its own kernel, invisible from here), else None."""
        if not self._view_looked and self.container_id and not self.gvisor and engine.is_local():
            self._view_looked = True
            pid = await self._server_pid()
            self._view = await asyncio.to_thread(ProcessView.find, pid) if pid > 0 else None
        return self._view

    async def _server_pid(self) -> int:
        """The host pid of the container's first process: the only one its channel socket accepts."""
        info = self._inspect or await engine.call(engine.api().inspect_container, self.container_id)
        return int((info.get("State") or {}).get("Pid") or -1)

    async def _keep_apart(self) -> None:
        """Before the sandbox runs anything: its packet filter on a shared network (netfilter.py), and
        its own address under its name in /etc/hosts."""
        net = self.spec.limits.network
        if net not in ("bridge", REGISTRIES) or (os.environ.get(UNISOLATED_ENV) == "1" and netfilter.why_unavailable()):
            return
        self.isolated = True
        rules = netfilter.bridge_rules if net == "bridge" else netfilter.registries_rules
        from .proxy import PORT

        where = netfilter.placement(self._inspect, (self._proxy[0], PORT) if self._proxy else None)
        try:
            await asyncio.to_thread(netfilter.apply, where, rules(where))
        except SandboxError:
            why, by_itself = await self._dead_reason()
            if "stopped" in why or "no longer exists" in why or by_itself:  # killed meanwhile, not the rules' fault
                raise (SandboxBrokenByItself if by_itself else SandboxError)(f"sandbox {self.name} is gone: {why}") \
                    from None
            raise
        address = netfilter.own_address(self._inspect)
        if address:
            text = etc_files.contents(net, True, self._proxy, address)["hosts"]
            await asyncio.to_thread(etc_files.rewrite, self.name, "hosts", text)

    # ------------------------------------------------------------------ recycling (see recycle.py)
    async def _keep_for_recycling(self) -> None:
        """Note what a reset needs (the container's layers), unless something makes this container one
        that must never serve a second sample: capabilities given back (CAP_SYS_PTRACE would reach the
        server), or a server that cannot vouch for itself (server.py, Guard)."""
        from . import recycle

        guard = self.server_info.get("guard") or {}
        if self.spec.limits.cap_add:
            self.not_recyclable = "capabilities were given back (--cap-add)"
        elif self.gvisor:
            self.not_recyclable = "gVisor keeps its own view of the files a restore would change: fresh sandboxes"
        elif guard.get("dumpable") != 0 or guard.get("gaps") or "guard" not in self.server_info:
            self.not_recyclable = "; ".join(guard.get("gaps") or []) or "the server cannot protect itself"
        if self.not_recyclable:
            return
        try:
            restorer = recycle.restorer_for(self._inspect)
            view = await self._process_view()
            if view is None:
                raise resetcheck.ResetRefused("this machine cannot see the container's processes (its cgroup) to "
                                              "check a reset")
            self._reset_baseline = await asyncio.to_thread(resetcheck.take, view)
            self._restorer = restorer
            await asyncio.to_thread(self._restorer.note_baseline)
        except (OSError, resetcheck.ResetRefused) as e:
            self._restorer = None  # not recyclable here: a pool closes it after its sample
            self.not_recyclable = str(e)

    @property
    def alive(self) -> bool:
        """Started, not closed, and its server still answers (e.g. not cut off by an engine restart)."""
        return self._channel_alive() and not self._closed

    @property
    def recyclable(self) -> bool:
        return self._restorer is not None and self._channel_alive() and not self._closed

    async def recycle(self) -> dict:
        """Make this sandbox as good as new for another sample: every process killed, /dev/shm and
        IPC emptied (server.py), the filesystem put back to the image's (recycle.py), the engine's
        files as at start, a fresh shell in the working folder. Returns what it did; raises
        SandboxError when it cannot, and the caller must then close it, never reuse it."""
        from .recycle import RestoreError

        if not self.recyclable:
            raise SandboxError("this sandbox cannot be recycled (not started with spec.recyclable, its layers out of "
                               "this process's reach, or closed)")
        t0 = time.perf_counter()
        reply = await self._request(protocol.RESET, 30.0)
        if reply.get("left"):
            self._restorer = None
            raise SandboxError(f"{reply['left']} process(es) of the last sample would not die")
        if reply.get("problems") or "problems" not in reply:
            self._restorer = None
            raise SandboxError("the last sample left what a reset cannot put back: "
                               + "; ".join(reply.get("problems") or ["the server did not say"]))
        try:  # the server says it is clean: this machine looks for itself (resetcheck.py)
            checked = await asyncio.to_thread(resetcheck.verify, self._view, self._reset_baseline)
        except resetcheck.ResetRefused as e:
            self._restorer = None
            raise SandboxError(f"not reused: {e}") from None
        try:
            restored = await asyncio.to_thread(self._restore_files)
        except (OSError, RestoreError) as e:
            self._restorer = None
            raise SandboxError(f"could not restore the sandbox's filesystem: {e}") from e
        await self._request(protocol.FRESH_SHELL, 30.0, cwd=self.spec.workdir)
        self.uses += 1
        self.last_recycle = {"use": self.uses, "seconds": round(time.perf_counter() - t0, 4),
                             "killed": reply.get("killed", 0), "cleared": reply.get("cleared", 0),
                             "host_killed": checked.killed, "sockets_closed": checked.sockets_closed, **restored}
        return self.last_recycle

    def _restore_files(self) -> dict:
        return self._restorer.restore().as_dict()

    async def _own_filesystem(self, api) -> Optional[str]:
        """On storage that cannot cap a container's disk: a filesystem of that size (disk.py)."""
        from . import disk

        lim = self.spec.limits
        if not lim.disk or limits.disk_mode(api)[0] != limits.OWN_FILESYSTEM:
            return None
        info = await engine.call(api.inspect_container, self.container_id)
        upper = (info.get("GraphDriver") or {}).get("Data", {}).get("UpperDir", "")
        try:
            await engine.call(disk.attach, upper, lim.disk_bytes)
        except (OSError, subprocess.SubprocessError) as e:
            raise SandboxError(f"could not give the sandbox its {lim.disk} disk ({e}); "
                               "--disk none runs it without a disk limit") from None
        return lim.disk

    async def _create(self, api, labels: dict, size: Optional[str]) -> dict:
        import docker.errors

        net = self.spec.limits.network
        binds = None
        if not net.startswith("container:") and engine.is_local():  # that mode shares the other's files
            files = etc_files.contents(net, net in (*BUILTIN_NETWORKS, REGISTRIES), self._proxy)
            podman = await engine.call(engine.is_podman)
            if podman:
                files.update(etc_files.podman_files())
            binds = await asyncio.to_thread(etc_files.create, self.name, files, labels[LABEL_OWNER])
            if not podman and self._direct_channel_possible():
                self._listener, bind = listen(etc_files.root() / self.name)
                binds.update(bind)
        host_config = api.create_host_config(**limits.host_config_kwargs(self.spec.limits, size, self._network_mode,
                                                                          self._runtime, self.gvisor),
                                             binds=binds)
        creating = asyncio.ensure_future(engine.call(
            api.create_container, self.spec.image, command=["python3", "-c", BOOTSTRAP],
            entrypoint=[], stdin_open=True, detach=False, tty=False, working_dir=self.spec.workdir,
            environment=self._env or None, labels=labels, name=self.name, hostname="sandbox",
            host_config=host_config))
        try:
            return await asyncio.shield(creating)
        except asyncio.CancelledError:
            # the engine may create the container anyway: wait for it, then remove it
            try:
                self.container_id = (await creating)["Id"]
            except Exception:
                pass
            await self.close()
            raise
        except docker.errors.ImageNotFound:
            raise ImageNotFound(self.spec.image) from None
        except docker.errors.APIError as e:
            if e.status_code == 404 and "image" in str(e).lower():
                raise ImageNotFound(self.spec.image) from None
            if size and limits.is_quota_refusal(str(e.explanation or e)):
                raise  # start() retries without the disk limit
            raise SandboxError(f"could not create the sandbox container: {e.explanation or e}") from e

    def info(self) -> dict:
        return {"backend": self.backend, "image": self.spec.image, "name": self.name,
                "container_id": self.container_id, "limits": vars(self.spec.limits).copy(),
                "disk_limit": self.disk_limit,
                "timings": dict(self.timings), "server_info": dict(self.server_info),
                **({"uses": self.uses, "recycled": dict(self.last_recycle)} if self.uses > 1 else {}),
                **({"not_recyclable": self.not_recyclable} if self.spec.recyclable and self.not_recyclable else {}),
                **({"isolated": True} if self.isolated else {}),
                **({"network": dict(self.network_info)} if self.network_info else {})}

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
            # Ctrl-C or SIGTERM while removing: finish removing it first (the process may exit right after)
            await asyncio.wait([removing])
            if not removing.cancelled():
                removing.exception()  # retrieved: a failed removal is tried again by a later close()
            raise

    async def _remove(self) -> None:
        if self._listener is not None:  # created, never started
            self._listener.close()
            self._listener = None
        if self.channel is not None:
            await self.channel.close()
        if self.container_id:
            try:
                await engine.call(engine.remove_container, engine.api(), self.container_id)
            except Exception as e:
                if not engine.is_not_found(e) and "already in progress" not in str(e):
                    self._closed = False  # let a later close() try again
                    UNREMOVED[self.container_id] = self.name
                    raise SandboxError(f"could not remove container {self.name}: {e}") from e
            LIVE.pop(self.container_id, None)
            UNREMOVED.pop(self.container_id, None)
        await asyncio.to_thread(etc_files.remove, self.name)

    async def snapshot(self):
        """Freeze this sandbox's files and shell state into a `Snapshot` that starts independent copies
        of it (snapshot.py); call it between commands."""
        from . import snapshot

        return await snapshot.take(self)

    async def _dead_reason(self) -> tuple[str, bool]:
        """Why the container stopped, and whether it was the sandbox's own doing. Who ended an episode
        decides its fate, so "not the sandbox's" needs positive evidence from outside it: the engine's
        API failed or says the container is gone, the engine's events show a kill through its API (which
        nothing in the sandbox can reach) or its stream broke while the container ran, or the container's
        processes were killed for memory with no out-of-memory event of its own limit (this machine ran
        out). Every other end, however it came about (its memory limit, a signal or limit it set on its
        own first process, a server it crashed), is the sandbox's."""
        try:
            info = await engine.call(engine.api().inspect_container, self.container_id)
        except Exception as e:
            if engine.is_not_found(e):
                return "the container was removed through the engine's API (nothing in a sandbox can do that)", False
            return f"the Docker engine did not answer ({type(e).__name__}: {e})", False
        state = info.get("State", {})
        history = await asyncio.to_thread(events.watcher().history, self.container_id, self._created_at,
                                          0.0 if state.get("Running") else 2.0)
        kill = history.killed_from_outside()
        if kill is not None:
            return (f"the container was killed through the engine's API (signal {kill.attributes.get('signal', '?')}; "
                    "nothing in a sandbox can do that)"), False
        if history.stream_broke_at is not None:
            return "the Docker engine went away while the container ran", False
        own_oom = history.first("oom")
        if state.get("OOMKilled") and own_oom is None and history.complete:
            return "this machine ran out of memory: the kernel killed the container's processes outside its limit", \
                False
        code = state.get("ExitCode")
        if state.get("Running"):
            return "the container's server stopped answering (what ran in it did so: nothing outside it did)", True
        why = "its memory limit" if own_oom is not None else f"exit code {code}"
        if self.gvisor and own_oom is None and code not in (0, 137, 143, None):
            why = f"gVisor stopped: what ran in it exhausted the sandbox's limits (exit code {code})"
        return f"the container stopped ({why}); nothing outside it stopped it", True

    def _channel_alive(self) -> bool:
        return self.channel is not None and not self.channel.closed_reason

    def _channel_free(self) -> bool:
        """Alive and idle: file operations may use the server (else the archive API)."""
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

