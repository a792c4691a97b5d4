"""How a bwrap sandbox is started: its folder on the host, its limits, and the command line.

    unshare --user --map-root-user --mount        a user and mount namespace of our own (no root needed)
      sh -c 'mount -t overlay ... && exec "$@"'   the image's files (read-only) under the sandbox's own
                                                  upper layer: its writes land in its folder, nowhere else
        bwrap --unshare-all --unshare-user ...    the sandbox: every namespace its own (the network's too,
                                                  but for --network host), uid 0 inside, a few
                                                  capabilities (in its namespace only), no nested user
                                                  namespaces, /proc, /dev, /sys read-only, dies with us
          python3 -c '<limits>; <bootstrap>'      the in-sandbox server as PID 1 (guest/server.py)

bubblewrap 0.8 (Debian bookworm's) has no overlay options of its own (0.9 added them), so the overlay
is mounted one namespace further out, where we are root of a user namespace of our own: the kernel
lets such a root mount overlayfs since Linux 5.11.

Limits are resource limits (rlimits), set by the server's bootstrap inside the sandbox's own user
namespace, so that the kernel counts processes per sandbox (Linux 5.14+ counts RLIMIT_NPROC per user
namespace; set outside, it would count every process of the user on the host):
- pids: RLIMIT_NPROC, the sandbox's processes and threads together;
- memory: RLIMIT_DATA, per process (heap and private writable mappings: what a memory bomb grows);
  not for the sandbox in all, which needs a cgroup;
- disk: RLIMIT_FSIZE, per file (no file written larger than the disk limit), not in all;
- no core files; cpus: not held (no cgroup).
"""
from __future__ import annotations

import os
import resource
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from ...core.units import parse_size
from .. import netfiles
from ..base import SandboxLimits
from ..guest.protocol import BOOTSTRAP, STATE_DIR
from ..owner import owner_gone
from ..rootfs import RootFS, remove_tree
from .network import RESOLV_CONF

DIR_ENV = "INSANDBOX_BWRAP_DIR"
OWNER_FILE, PROCESS_FILE = "owner", "bwrap.pid"
# what apt-get and pip need as root (as the Docker backend keeps), in the sandbox's user namespace only
CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL")
SHM_BYTES = 64 << 20  # /dev/shm, as the Docker engine's default
STATE_BYTES = 64 << 20  # the server's own folder
MOUNT = ('mount -t overlay overlay -o "lowerdir=$1,upperdir=$2,workdir=$3,userxattr" "$4" || exit 125; '
         'shift 4; exec "$@"')


def root() -> Path:
    """Where sandboxes' folders live: the temporary folder (one per user), or INSANDBOX_BWRAP_DIR. It
    must be a local filesystem with extended attributes (ext4, xfs, tmpfs): an overlay's upper layer."""
    if os.environ.get(DIR_ENV):
        return Path(os.environ[DIR_ENV])
    return Path(tempfile.gettempdir()) / f"insandbox-{os.geteuid()}-bwrap"


def rlimits(limits: SandboxLimits) -> dict[str, int]:
    """resource module names -> value (soft and hard alike)."""
    out = {"RLIMIT_CORE": 0}
    if limits.pids:
        out["RLIMIT_NPROC"] = int(limits.pids)
    if limits.memory:
        out["RLIMIT_DATA"] = parse_size(limits.memory)
    if limits.disk:
        out["RLIMIT_FSIZE"] = parse_size(limits.disk)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard > 1 << 20:  # as many open files as a container gets
        out["RLIMIT_NOFILE"] = 1 << 20
    return out


def bootstrap(limits: dict[str, int]) -> str:
    """The server's bootstrap, its limits set first (in the sandbox's own user namespace)."""
    sets = "".join(f"r.setrlimit(r.{name},({v},{v}));" for name, v in sorted(limits.items()))
    return f"import resource as r;{sets}{BOOTSTRAP}"


class Folder:
    """A sandbox's folder on the host: upper/ and work/ (its overlay), etc/ (its /etc files), the
    owner (for `clean`) and the bwrap process (for `clean --all` and a forced exit)."""

    def __init__(self, name: str):
        self.path = root() / name
        self.upper, self.work, self.merged, self.etc = (self.path / d for d in ("upper", "work", "merged", "etc"))

    def create(self, owner: str, network: str) -> None:
        base = self.path.parent
        base.mkdir(parents=True, exist_ok=True)
        os.chmod(base, 0o700)  # other users have no business in a sandbox's files
        self.path.mkdir()
        (self.path / OWNER_FILE).write_text(owner)  # first: `clean` tells whose it is from here
        for d in (self.upper, self.work, self.merged, self.etc):
            d.mkdir()
        files = netfiles.contents(network, True)
        if network == "bridge":  # slirp4netns's forwarder, whatever this machine's resolver is (127.0.0.53 too)
            files["resolv.conf"] = RESOLV_CONF
        for name, text in files.items():
            (self.etc / name).write_text(text)

    def note_process(self, pid: int, start: str) -> None:
        (self.path / PROCESS_FILE).write_text(f"{pid}:{start}")

    def remove(self) -> None:
        remove_tree(self.path)


def folders() -> list[tuple[Path, str, str]]:
    """(folder, owner, bwrap process "pid:start") of every sandbox folder of this user here."""
    out = []
    try:
        found = [p for p in root().iterdir() if p.is_dir()]
    except OSError:
        return []
    for p in found:
        out.append((p, _read(p / OWNER_FILE), _read(p / PROCESS_FILE)))
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def leftover_reason(owner: str, everything: bool) -> str:
    return owner_gone(owner) or ("--all" if everything else "")


def command(fs: RootFS, folder: Folder, limits: SandboxLimits, env: dict[str, str], workdir: str,
            info_fd: int, hostname: str = netfiles.HOSTNAME, program: Optional[list[str]] = None) -> list[str]:
    """The whole command line of one sandbox: its server (or `program`) as its PID 1."""
    for p in (fs.tree, folder.upper, folder.work, folder.merged):
        if any(c in str(p) for c in ",:\\"):  # overlay's mount options would read them as separators
            raise ValueError(f"{p}: a path with ',', ':' or '\\' cannot be an overlay layer")
    argv = ["unshare", "--user", "--map-root-user", "--mount", "--", "/bin/sh", "-c", MOUNT, "sh",
            str(fs.tree), str(folder.upper), str(folder.work), str(folder.merged),
            "bwrap", "--unshare-all", "--unshare-user", "--uid", "0", "--gid", "0", "--disable-userns",
            "--die-with-parent", "--new-session", "--as-pid-1", "--hostname", hostname, "--info-fd", str(info_fd),
            "--cap-drop", "ALL"]
    for cap in (*CAPS, *limits.cap_add):
        argv += ["--cap-add", "CAP_" + cap.upper().removeprefix("CAP_")]
    if limits.network == "host":
        argv.append("--share-net")
    argv += ["--bind", str(folder.merged), "/",
             "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys",  # bwrap leaves it writable to uid 0
             "--dev", "/dev", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
             "--mqueue", "/dev/mqueue", "--remount-ro", "/dev",  # /dev itself: device nodes only, nothing written
             "--ro-bind", "/sys", "/sys", "--tmpfs", "/sys/fs/cgroup", "--remount-ro", "/sys/fs/cgroup",
             "--size", str(STATE_BYTES), "--tmpfs", STATE_DIR]
    for name, where in netfiles.FILES.items():
        argv += ["--ro-bind", str(folder.etc / name), where]
    argv += ["--dir", workdir, "--chdir", workdir, "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    argv += ["--", *(program or ["python3", "-c", bootstrap(rlimits(limits))])]
    return argv


def environment(fs: RootFS, extra: dict, hostname: str = netfiles.HOSTNAME) -> dict[str, str]:
    """The sandbox's environment: the image's, then the spec's; never the host's."""
    env = {"PATH": fs.env.get("PATH") or "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "HOME": "/root", "HOSTNAME": hostname}
    env.update(fs.env)
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    return env


def tools_missing() -> Optional[str]:
    """What this host lacks to start sandboxes at all (None: nothing)."""
    for tool in ("bwrap", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: apt-get install bubblewrap util-linux mount)"
    return None
