"""What a Docker sandbox may do to its host: the container settings behind SandboxLimits.

- Capabilities: everything is dropped except what `apt-get` and `pip` need as root (owning and
  chmod-ing files, apt's switch to its `_apt` user, killing that helper). Gone, among others:
  MKNOD (no device nodes), NET_RAW (no raw sockets, no spoofing on the bridge), SYS_CHROOT,
  SETFCAP, AUDIT_WRITE, NET_BIND_SERVICE.
- `no-new-privileges`: no setuid binary or file capability raises a process's privileges.
- Disk: `--storage-opt size=` caps what the container can write where the engine's storage
  enforces it (btrfs, ZFS, devicemapper, overlay2 on XFS with pquota). On overlay2 elsewhere each
  sandbox gets a filesystem of its own of that size (disk.py). Where neither works, sandboxes run
  without a disk limit, and the run says so when it starts.
"""
from __future__ import annotations

import threading
from typing import Optional

from ..base import SandboxLimits
from ..guest.protocol import STATE_DIR
from . import engine

KEPT_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL")
NO_NEW_PRIVILEGES = "no-new-privileges:true"
# storage drivers whose size= counts the image's data too (a snapshot's referenced bytes):
# the limit passed to the engine is the image's size plus what the sandbox may write
_COUNTS_IMAGE = ("btrfs", "devicemapper")

ENGINE, OWN_FILESYSTEM = "engine", "own filesystem"  # how a sandbox's disk is capped

_lock = threading.Lock()
_mode: dict[str, tuple[Optional[str], str]] = {}  # docker host -> (how the disk is capped, or None; why not)
_driver: dict[str, str] = {}
_image_size: dict[tuple[str, str], int] = {}


def disk_mode(api) -> tuple[Optional[str], str]:
    """How this engine's sandboxes get their disk limit: ENGINE (`--storage-opt size=`, on storage
    that enforces it), OWN_FILESYSTEM (see disk.py), or None, with the reason. Looked at once."""
    from . import disk

    host = engine.docker_host()
    with _lock:
        if host not in _mode:
            info = api.info()  # Podman calls its overlay driver `overlay`: size= works there too, on XFS
            driver = _driver[host] = info.get("Driver", "")
            backing = dict(tuple(x) for x in info.get("DriverStatus") or () if len(x) == 2).get("Backing Filesystem")
            if driver in ("btrfs", "zfs", "devicemapper") or (driver in ("overlay2", "overlay") and backing == "xfs"):
                _mode[host] = (ENGINE, "")
            else:
                why = disk.unavailable(info)
                _mode[host] = (OWN_FILESYSTEM, "") if why is None else (None, (
                    f"the engine's storage ({driver} on {backing or 'unknown'}) cannot cap a container's disk, "
                    f"and {why}"))
        return _mode[host]


def engine_refused_size(api, why: str) -> None:
    """The engine refused size= after all (overlay2 on XFS mounted without pquota): from now on
    sandboxes get a filesystem of their own, or no limit where that cannot be done either."""
    from . import disk

    cannot = disk.unavailable(api.info())
    _mode[engine.docker_host()] = (OWN_FILESYSTEM, "") if cannot is None else (None, f"{why}, and {cannot}")


def storage_size(api, image: str, disk_bytes: Optional[int]) -> Optional[str]:
    """The engine's `size=` for a sandbox allowed to write `disk_bytes`, or None (no limit, or not the engine's)."""
    if not disk_bytes or disk_mode(api)[0] != ENGINE:
        return None
    size = disk_bytes
    if _driver_counts_image(api):
        key = (engine.docker_host(), image)
        if key not in _image_size:
            _image_size[key] = int(api.inspect_image(image).get("Size") or 0)
        size += _image_size[key]
    return str(size)


def _driver_counts_image(api) -> bool:
    return _driver.get(engine.docker_host()) in _COUNTS_IMAGE


def is_quota_refusal(explanation: str) -> bool:
    """The engine refused size= because its storage cannot do it (overlay2 without pquota, ...)."""
    text = explanation.lower()
    return "storage-opt" in text or "storage opt" in text or "quota" in text and "not" in text


def unenforceable(limits: SandboxLimits) -> str:
    """Why this engine would start sandboxes without the memory, CPU or process limits asked for, which
    it does silently ("" when it sets them): rootless Podman without those cgroup controllers delegated
    to its user (cgroup v1 delegates none)."""
    known = {"memory": ("memory", "memory", "--memory none"), "cpu": ("cpus", "CPU", "--cpus 0"),
             "pids": ("pids", "process", "--pids-limit 0")}  # controller: (field, what, how to turn it off)
    asked = {c: known[c] for c in known if getattr(limits, known[c][0])}
    if not asked or not engine.is_podman():
        return ""
    host = engine.podman_host()
    if not (host.get("security") or {}).get("rootless"):
        return ""
    v2 = host.get("cgroupVersion") == "v2"
    missing = [c for c in asked if not v2 or c not in (host.get("cgroupControllers") or ())]
    if not missing:
        return ""
    where = "on cgroup v1" if not v2 else f"without the {', '.join(missing)} cgroup controller(s) delegated"
    return (f"the engine at {engine.docker_host()} is rootless Podman {where}: it would start sandboxes without "
            f"their {'/'.join(asked[c][1] for c in missing)} limits. Use rootful Podman (or cgroup v2 with the "
            f"controllers delegated), or run without them ({' '.join(asked[c][2] for c in missing)})")


# Under gVisor the engine's pids cgroup counts gVisor's own host tasks, not the sandbox's processes: with
# Debian's runsc (ptrace platform) each process inside costs about 8-10 of them, and reaching the limit
# kills the whole sandbox (measured: --pids-limit 1024 held 100 `sleep`s and died at 150; 12,288 held 1,000).
# So the host's limit is scaled, and --pids-limit N lets about N processes run inside.
GVISOR_HOST_TASKS_PER_PROCESS = 12


def host_pids(limits: SandboxLimits, gvisor: bool) -> Optional[int]:
    """The pids limit the engine's cgroup gets: the host tasks the sandbox may hold at most."""
    return limits.pids * GVISOR_HOST_TASKS_PER_PROCESS if limits.pids and gvisor else limits.pids


def host_config_kwargs(limits: SandboxLimits, size: Optional[str], network_mode: str,
                       runtime: Optional[str] = None, gvisor: bool = False) -> dict:
    """Keyword arguments of the Docker SDK's create_host_config for these limits (network_mode:
    limits.network as the backend resolved it, e.g. the registries proxy's network)."""
    pids = host_pids(limits, gvisor)
    kwargs = dict(
        mem_limit=limits.memory_bytes, memswap_limit=limits.memory_bytes,  # same value: no swap on top
        nano_cpus=int(limits.cpus * 1e9) if limits.cpus else None, pids_limit=pids,
        network_mode=network_mode, init=False,
        cap_drop=["ALL"], cap_add=sorted({*KEPT_CAPABILITIES, *(c.upper() for c in limits.cap_add)}),
        security_opt=[NO_NEW_PRIVILEGES],
        # the server's own files (the command being run, the shell's saved state) live in memory,
        # so a sandbox whose disk is full still runs the commands that free it
        tmpfs={STATE_DIR: "size=16m,mode=0700"},
        # the engine would keep every byte the server writes to stdout or stderr in a log file on the
        # host, with no size limit; the channel (the attach stream) is where insandbox reads them
        log_config={"Type": "none", "Config": {}})
    if size:
        kwargs["storage_opt"] = {"size": size}
    if runtime or limits.runtime:  # the engine's name for it (runtimes.resolve), else as given
        kwargs["runtime"] = runtime or limits.runtime
    return kwargs
