"""How a bwrap sandbox is started: its folder on the host, its limits, and the command line.

    python3 -I -S -c LAUNCHER                     this host's Python, before anything else: a session
                                                  keyring that holds nothing (not the user's, with its
                                                  Kerberos and AFS tokens); the sandbox's cgroup joined
                                                  (cgroup.py), so all that follows is inside it; a user and
                                                  mount namespace of our own (no root needed), a network
                                                  namespace with its loopback up (but for --network host);
                                                  there, the image's files (read-only, bound as `lower`)
                                                  under the sandbox's own upper layer (its writes land in
                                                  its folder, nowhere else), and a sysfs of that network
                                                  namespace (`sys`)
      bwrap --unshare-all --share-net ...         the sandbox: every other namespace its own, uid 0 inside,
            --seccomp FD                          a few capabilities (in its namespace only), no nested user
                                                  namespaces, the seccomp filter of seccomp.py, /proc, /dev,
                                                  /sys read-only with the host's kernel internals masked,
                                                  dies with us
        python3 -c '<limits>; <bootstrap>'        the in-sandbox server as PID 1 (guest/server.py)

bubblewrap 0.8 (Debian bookworm's) has no overlay options of its own (0.9 added them), so the overlay
is mounted one namespace further out, where we are root of a user namespace of our own: the kernel
lets such a root mount overlayfs since Linux 5.11, and sysfs in a network namespace it owns (which is
why the launcher, not bwrap, makes the network namespace: bwrap shares it, one per sandbox).

What the sandbox sees of the host. /proc is its own (its pid namespace), with what Docker's runc masks
masked (an empty file or an empty read-only tmpfs over /proc/keys, /proc/key-users, kcore, interrupts,
timer_list, sched_debug, latency_stats, timer_stats, acpi, asound, scsi, and OpenAFS's /proc/fs/openafs,
whose ioctl hands out the user's tokens) and what it keeps read-only (/proc/sys, sysrq-trigger, bus, fs,
irq). /sys is a fresh sysfs of a network namespace of its own, so no host network interface appears
anywhere in it (sysfs filters them by namespace), /sys/firmware, powercap and the cgroups masked; with
--network host it is the host's /sys (read-only, every mount below it masked), interfaces included, as
the network is. In /proc/self/mountinfo the overlay's layers are named `lower`, `upper` and `work`
(relative to the sandbox's folder, which is the mount's working directory), and the /etc files are
bound from the overlay itself: no host path appears there. What remains: device numbers and mount
ids, the kernel (uname, /proc/cmdline, /proc/cpuinfo, /sys/devices) as in any container.

Limits (the cgroup where cgroup.py finds one this user may write, else resource limits set by the
server's bootstrap inside the sandbox's own user namespace, so that the kernel counts processes per
sandbox: Linux 5.14+ counts RLIMIT_NPROC per user namespace; set outside, it would count every process
of the user on the host):
- memory: with a cgroup, the sandbox in all (memory.max / memory.limit_in_bytes, no swap on top:
  shared mappings, tmpfs and page cache count), and RLIMIT_DATA per process (a memory bomb gets
  MemoryError rather than the OOM killer); without one, RLIMIT_AS per process: the address space,
  shared mappings included, but programs that reserve large virtual ranges (a JVM, Go, Node's V8,
  CUDA) fail under it; not the sandbox in all, nor memory in no address space (SysV shared memory,
  memfd and tmpfs files written with write(): /dev/shm and the server's folder are 64 MB tmpfs, a
  file at most the disk limit). INSANDBOX_BWRAP_MEMORY=cgroup refuses --memory then;
- pids: RLIMIT_NPROC, the sandbox's processes and threads together, and pids.max with a cgroup;
- cpus: the cgroup's CPU quota; not held without one;
- disk: RLIMIT_FSIZE, per file (no file written larger than the disk limit), not in all;
- no core files.
The host reads them back from outside after the start (`limits_refusal`: /proc/<init>/limits; the
cgroup's own files) and refuses a sandbox whose limits are not the ones asked for.
"""
from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional

from .. import netfiles
from ..base import SandboxLimits
from ..guest.protocol import BOOTSTRAP, STATE_DIR
from ..owner import owner_gone
from ..rootfs import RootFS, remove_tree
from . import seccomp
from .cgroup import Group
from .network import RESOLV_CONF

DIR_ENV = "INSANDBOX_BWRAP_DIR"
OWNER_FILE, PROCESS_FILE, CGROUP_FILE = "owner", "bwrap.pid", "cgroups"
# what apt-get and pip need as root (as the Docker backend keeps), in the sandbox's user namespace only
CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL")
SHM_BYTES = 64 << 20  # /dev/shm, as the Docker engine's default
STATE_BYTES = 64 << 20  # the server's own folder
# argv: keyctl's number, "net" (a network namespace of its own) or "host", the sandbox's folder, the
# image's tree, the cgroup.procs files to join, "--", bwrap's command line. The session keyring is one
# named keyring shared by the user's sandboxes (one each would run into the user's key quota, 200 keys by
# default), which holds nothing: the sandbox's filter denies every keyring syscall, so nothing is ever
# added from inside. ENOSYS (no keyrings) and EPERM (a filter around this process already denies them,
# and the sandbox inherits it) leave nothing to hide. Then what `unshare --user --map-root-user --mount
# [--net]` would do, and the mounts, made in the sandbox's folder: the layers named relative to it, so
# no host path reaches /proc/self/mountinfo. Exit codes: 126 before the mounts, 125 overlayfs, 124 sysfs.
LAUNCHER = r"""
import ctypes, os, sys
end = sys.argv.index("--")
lib, L, B = ctypes.CDLL(None, use_errno=True), ctypes.c_long, ctypes.c_char_p
nr, net, folder, tree = int(sys.argv[1]), sys.argv[2] == "net", sys.argv[3], sys.argv[4]
def fail(what, code=126):
    sys.stderr.write("insandbox: %s: %s\n" % (what, os.strerror(ctypes.get_errno())))
    sys.exit(code)
if lib.syscall(L(nr), L(1), B(b"insandbox-sandboxes")) < 0 and ctypes.get_errno() not in (1, 38):
    fail("no session keyring of the sandbox's own")
lib.syscall(L(nr), L(5), L(-3), L(0x3F1B0000))  # KEYCTL_SETPERM: the user may search it, so the next one joins it
for path in sys.argv[5:end]:
    with open(path, "w") as f:
        f.write(str(os.getpid()))
uid, gid = os.geteuid(), os.getegid()
if lib.unshare(0x10000000 | 0x00020000 | (0x40000000 if net else 0)) != 0:  # CLONE_NEWUSER, NEWNS, NEWNET
    fail("no user namespace of its own")
for name, text in (("uid_map", "0 %d 1" % uid), ("setgroups", "deny"), ("gid_map", "0 %d 1" % gid)):
    with open("/proc/self/" + name, "w") as f:
        f.write(text)
if net:  # SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP: the kernel gives lo 127.0.0.1 and ::1
    fd, req = lib.socket(2, 2, 0), ctypes.create_string_buffer(b"lo", 40)
    flags = ctypes.c_short.from_buffer(req, 16)
    if fd < 0 or lib.ioctl(fd, L(0x8913), req) != 0:
        fail("no loopback")
    flags.value |= 1
    if lib.ioctl(fd, L(0x8914), req) != 0:
        fail("no loopback")
    os.close(fd)
os.chdir(folder)
if lib.mount(None, B(b"/"), None, L(0x44000), None) != 0:  # MS_REC | MS_PRIVATE: nothing leaves this namespace
    fail("mount namespace")
if lib.mount(B(os.fsencode(tree)), B(b"lower"), None, L(0x5000), None) != 0:  # MS_BIND | MS_REC
    fail("the image's files", 125)
if lib.mount(B(b"overlay"), B(b"merged"), B(b"overlay"), L(0),
             B(b"lowerdir=lower,upperdir=upper,workdir=work,userxattr")) != 0:
    fail("overlayfs", 125)
if net and lib.mount(B(b"sysfs"), B(b"sys"), B(b"sysfs"), L(0xF), None) != 0:  # RDONLY|NOSUID|NODEV|NOEXEC
    fail("sysfs", 124)
os.execvp(sys.argv[end + 1], sys.argv[end + 1:])
"""
# Docker's masked paths (runc), /proc/key-users, and OpenAFS's ioctl (uid-based tokens)
PROC_MASKED = ("/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/key-users",
               "/proc/latency_stats", "/proc/sched_debug", "/proc/scsi", "/proc/timer_list", "/proc/timer_stats",
               "/proc/fs/openafs")
# Docker's read-only ones; bwrap's --proc already covers /proc/bus and /proc/irq so
PROC_READONLY = ("/proc/fs", "/proc/sys", "/proc/sysrq-trigger")
SYS_MASKED = ("/sys/firmware", "/sys/devices/virtual/powercap", "/sys/fs/cgroup")


def root() -> Path:
    """Where sandboxes' folders live: the temporary folder (one per user), or INSANDBOX_BWRAP_DIR. It
    must be a local filesystem with extended attributes (ext4, xfs, tmpfs): an overlay's upper layer."""
    if os.environ.get(DIR_ENV):
        return Path(os.environ[DIR_ENV])
    return Path(tempfile.gettempdir()) / f"insandbox-{os.geteuid()}-bwrap"


def rlimits(limits: SandboxLimits, memory_in_cgroup: bool = False) -> dict[str, int]:
    """resource module names -> value (soft and hard alike). Memory: RLIMIT_DATA beside a cgroup that
    holds the sandbox in all, else RLIMIT_AS (shared mappings count in the address space, not in data)."""
    out = {"RLIMIT_CORE": 0}
    if limits.pids:
        out["RLIMIT_NPROC"] = int(limits.pids)
    if limits.memory_bytes:
        out["RLIMIT_DATA" if memory_in_cgroup else "RLIMIT_AS"] = limits.memory_bytes
    if limits.disk_bytes:
        out["RLIMIT_FSIZE"] = limits.disk_bytes
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard > 1 << 20:  # as many open files as a container gets
        out["RLIMIT_NOFILE"] = 1 << 20
    return out


def bootstrap(limits: dict[str, int]) -> str:
    """The server's bootstrap, its limits set first (in the sandbox's own user namespace)."""
    sets = "".join(f"r.setrlimit(r.{name},({v},{v}));" for name, v in sorted(limits.items()))
    return f"import resource as r;{sets}{BOOTSTRAP}"


# /proc/<pid>/limits' names of the resource limits
LIMIT_NAMES = {"RLIMIT_CORE": "Max core file size", "RLIMIT_NPROC": "Max processes", "RLIMIT_DATA": "Max data size",
               "RLIMIT_AS": "Max address space", "RLIMIT_FSIZE": "Max file size", "RLIMIT_NOFILE": "Max open files"}


def limits_refusal(limits_text: str, wanted: dict[str, int]) -> str:
    """Why a process's limits (its /proc/<pid>/limits) are not the ones asked for ("" when they are)."""
    rows = {}
    for line in limits_text.splitlines()[1:]:
        words = line[26:].split()  # the name column is 26 characters wide
        if len(words) >= 2:
            rows[line[:26].strip()] = words[:2]
    for name, value in sorted(wanted.items()):
        got = rows.get(LIMIT_NAMES[name])
        if got != [str(value), str(value)]:
            return f"the sandbox's init runs with {LIMIT_NAMES[name].lower()} {got or 'unknown'}, not {value}"
    return ""


class Folder:
    """A sandbox's folder on the host: upper/ and work/ (its overlay, the /etc files insandbox writes in
    upper/etc), lower/ and merged/ (where the image's files and the overlay are mounted in the sandbox's
    own mount namespace: empty here), sys/ (its sysfs, the same), the owner (for `clean`), the bwrap
    process (for `clean --all` and a forced exit) and its cgroups (for `clean`)."""

    def __init__(self, name: str):
        self.path = root() / name
        self.upper, self.work, self.merged, self.lower, self.sys = (
            self.path / d for d in ("upper", "work", "merged", "lower", "sys"))

    def create(self, owner: str, network: str) -> None:
        base = self.path.parent
        base.mkdir(parents=True, exist_ok=True)
        os.chmod(base, 0o700)  # other users have no business in a sandbox's files
        self.path.mkdir()
        (self.path / OWNER_FILE).write_text(owner)  # first: `clean` tells whose it is from here
        for d in (self.upper, self.work, self.merged, self.lower, self.sys):
            d.mkdir()
        files = netfiles.contents(network, True)
        if network == "bridge":  # slirp4netns's forwarder, whatever this machine's resolver is (127.0.0.53 too)
            files["resolv.conf"] = RESOLV_CONF
        for name, text in files.items():
            at = self.upper / netfiles.FILES[name].lstrip("/")
            at.parent.mkdir(parents=True, exist_ok=True)
            at.write_text(text)

    def note_process(self, pid: int, start: str) -> None:
        (self.path / PROCESS_FILE).write_text(f"{pid}:{start}")

    def note_cgroups(self, paths: list[Path]) -> None:
        (self.path / CGROUP_FILE).write_text("".join(f"{p}\n" for p in paths))

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


def cgroups_of(folder: Path) -> list[str]:
    return _read(folder / CGROUP_FILE).split()


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def leftover_reason(owner: str, everything: bool) -> str:
    return owner_gone(owner) or ("--all" if everything else "")


def _masks(paths: tuple[str, ...]) -> list[str]:
    """bwrap's options that hide these paths where the host has them: an empty read-only tmpfs over a
    folder, /dev/null over a file (empty to read, as Docker masks them; a device bind, as bwrap's
    read-only ones add nodev, under which opening it fails; what is written to it is gone)."""
    out = []
    for path in paths:
        if os.path.isdir(path):
            out += ["--tmpfs", path, "--remount-ro", path]
        elif os.path.exists(path):
            out += ["--dev-bind", "/dev/null", path]
    return out


def _mounts_below(top: str) -> list[str]:
    """The outermost mount points below `top` in this mount namespace (what a recursive bind brings along)."""
    points = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                point = line.split()[4].replace("\\040", " ")
                if point.startswith(top + "/"):
                    points.append(point)
    except OSError:
        return []
    return sorted(p for p in set(points) if not any(p.startswith(q + "/") for q in points))


def command(fs: RootFS, folder: Folder, limits: SandboxLimits, env: dict[str, str], workdir: str,
            info_fd: int, seccomp_fd: int, group: Optional[Group] = None, hostname: str = netfiles.HOSTNAME,
            program: Optional[list[str]] = None) -> list[str]:
    """The whole command line of one sandbox: its server (or `program`) as its PID 1."""
    private_net = limits.network != "host"
    argv = [sys.executable or "python3", "-I", "-S", "-c", LAUNCHER, str(seccomp.number("keyctl")),
            "net" if private_net else "host", str(folder.path), str(fs.tree),
            *(group.procs_files() if group else ()), "--",
            "bwrap", "--unshare-all", "--share-net", "--unshare-user", "--uid", "0", "--gid", "0", "--disable-userns",
            "--die-with-parent", "--new-session", "--as-pid-1", "--hostname", hostname, "--info-fd", str(info_fd),
            "--seccomp", str(seccomp_fd), "--cap-drop", "ALL"]
    for cap in (*CAPS, *limits.cap_add):
        argv += ["--cap-add", "CAP_" + cap.upper().removeprefix("CAP_")]
    argv += ["--bind", str(folder.merged), "/", "--proc", "/proc"]
    for path in PROC_READONLY:  # bwrap leaves them writable to uid 0, which is the host's root when root runs us
        if os.path.exists(path):
            argv += ["--ro-bind", path, path]
    argv += _masks(PROC_MASKED)
    argv += ["--dev", "/dev", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
             "--mqueue", "/dev/mqueue", "--remount-ro", "/dev"]  # /dev itself: device nodes only, nothing written
    if private_net:  # the sandbox network namespace's own sysfs: the host's interfaces are not in it
        argv += ["--ro-bind", str(folder.sys), "/sys", *_masks(SYS_MASKED)]
    else:  # the host's, as its network is; what is mounted below it (debugfs, cgroups, ...) masked
        argv += ["--ro-bind", "/sys", "/sys"]
        argv += _masks(tuple(sorted({*SYS_MASKED, *_mounts_below("/sys")})))
    argv += ["--size", str(STATE_BYTES), "--tmpfs", STATE_DIR]
    for where in netfiles.FILES.values():  # from the overlay itself: mountinfo names no host path
        argv += ["--ro-bind", str(folder.merged) + where, where]
    argv += ["--dir", workdir, "--chdir", workdir, "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    memory_in_cgroup = bool(group and group.holds("memory"))
    argv += ["--", *(program or ["python3", "-c", bootstrap(rlimits(limits, memory_in_cgroup))])]
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
    if shutil.which("bwrap") is None:
        return "bwrap is not installed (Debian: apt-get install bubblewrap)"
    return None
