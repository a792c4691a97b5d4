"""The machine behind the Docker engine, as the admission gate reads it: dockerd's and containerd's
processes, the pids cgroups that bound its containers, its storage folder, the Linux bridge of a network."""
from __future__ import annotations

import os
from typing import Optional

from ..admission import Host, _read
from . import engine


class EngineHost(Host):
    """Where the engine's processes and files are, found once (None: not visible from here)."""

    def __init__(self) -> None:
        self.local = engine.docker_host().startswith("unix://")
        self._pids: dict[str, Optional[str]] = {}
        self._bridges: dict[str, Optional[str]] = {}  # network -> its bridge interface
        self.root_dir: Optional[str] = None  # the engine's storage folder
        self.cgroups: list[str] = []  # pids cgroups whose limit bounds the engine's containers
        self.looked = False

    async def look(self) -> None:
        """Find the engine's processes' cgroups and its storage folder (once)."""
        if self.looked:
            return
        self.looked = True
        self.find_cgroups()
        if self.local:
            try:
                root = (await engine.call(lambda: engine.api().info())).get("DockerRootDir")
            except Exception:
                root = None
            self.root_dir = root if root and os.path.isdir(root) else None

    def engine_pid(self, name: str) -> Optional[str]:
        """dockerd's or containerd's pid, if it runs on this machine."""
        pid = self._pids.get(name)
        if pid is not None and _read(f"/proc/{pid}/comm").strip() == name:
            return pid
        pid = None
        if self.local:
            for p in os.listdir("/proc"):
                if p.isdigit() and _read(f"/proc/{p}/comm").strip() == name:
                    pid = p
                    break
        self._pids[name] = pid
        return pid

    def find_cgroups(self) -> None:
        pid = self.engine_pid("dockerd")
        found = []
        if pid:
            for line in _read(f"/proc/{pid}/cgroup").splitlines():
                _, controllers, path = line.split(":", 2)
                if controllers == "pids":  # cgroup v1
                    found += [f"/sys/fs/cgroup/pids{path}", "/sys/fs/cgroup/pids/docker"]
                elif controllers == "":  # cgroup v2
                    found += [f"/sys/fs/cgroup{path}", "/sys/fs/cgroup/docker", "/sys/fs/cgroup/system.slice"]
        self.cgroups = [d for d in dict.fromkeys(found) if os.path.isfile(f"{d}/pids.max")]

    async def bridge_of(self, network: str) -> Optional[str]:
        """The Linux bridge behind a Docker bridge network, if it is on this machine."""
        if network in self._bridges:
            return self._bridges[network]
        bridge = None
        if self.local and network not in ("none", "host") and not network.startswith("container:"):
            try:
                info = await engine.call(engine.api().inspect_network, network)
                if info.get("Driver") == "bridge":
                    bridge = (info.get("Options") or {}).get("com.docker.network.bridge.name") \
                        or f"br-{info['Id'][:12]}"
            except Exception:
                bridge = None
            if bridge and not os.path.isdir(f"/sys/class/net/{bridge}/brif"):
                bridge = None
        self._bridges[network] = bridge
        return bridge
