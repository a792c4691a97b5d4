"""The process that runs inside every sandbox container, as its PID 1.

The host starts the container with a tiny bootstrap (``BOOTSTRAP``) that reads this
file's source (protocol.py's first) from stdin and executes it, so the server always
matches the host's version and needs nothing in the image but ``python3`` (3.6 or newer)
and ``bash``. The host then speaks newline-delimited JSON over the container's
stdin/stdout (protocol.py).

Why a server: one ``docker exec`` costs ~100 ms, and a fresh ``bash -c`` per command
forgets ``cd`` and ``export``. Here one bash lives for the whole run; each command is
written to a file and ``source``d in it, so any bytes work (no quoting) and shell
state persists like in a terminal.

Why PID 1: the kernel ignores signals with default action sent to a namespace's init,
so ``pkill python`` or ``kill -9 1`` from the model cannot take the server down. As
PID 1 it also reaps orphaned processes. When the host goes away, stdin reaches EOF
(the container is created with StdinOnce) and the server exits, stopping the
container, so a killed host leaves no running sandbox behind.

Standard library only; keep it compatible with old Pythons (no walrus, no 3.8+ APIs).
"""
import base64
import codecs
import errno
import fcntl
import json
import os
import platform
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

try:  # both may be missing from a minimal Python: then the server cannot vouch for a reused container
    import ctypes
    import resource
except ImportError:  # pragma: no cover
    ctypes = resource = None

try:
    import queue
except ImportError:  # pragma: no cover - Python 2 is not supported, but fail clearly
    import Queue as queue  # noqa: N813

try:  # as a module of the host's package; in the sandbox, protocol.py's source ran just before this
    from .protocol import (  # noqa: F401
        BOOTSTRAP,
        EXEC,
        FRESH_SHELL,
        LIST_TREE,
        PING,
        READ,
        READ_MANY,
        RESET,
        RUN,
        STAT,
        STATE_DIR,
        WRITE,
    )
except ImportError:  # pragma: no cover - inside the sandbox
    pass
MARKER_VAR = "INSANDBOX_CMD_ID"  # exported per command (the server trusts nothing a command can set)
KILL_GRACE_S = 2.0  # after killing a timed-out tree, how long bash gets to return

# Aborting a timed-out command like Ctrl-C in a terminal: killing its processes is not
# enough, bash would go on with the rest of the command line (`sleep 1000; rm x`). So
# the server first sends bash SIGUSR1, whose trap turns on a DEBUG trap that, under
# extdebug, makes every further command inside the sourced file (or a function it
# called) act as `return`: the command unwinds, even a pure-bash `while :; do :; done`,
# and bash is back at the top level, where the trap removes itself.
#
# The shell also keeps a copy of its output pipe on SAVED_OUTPUT_FD (hidden from commands), so
# that a command that closes or redirects the shell's stdout or stderr (`exec 1>&- 2>&-`) does
# not leave every later command mute: after each command they are pointed back at the pipe
# (CHECK_STREAMS), and the model is told.
SAVED_OUTPUT_FD = 62
SHELL_INIT = (
    "__isb_unwind() { if [[ ${#BASH_SOURCE[@]} -gt 1 ]]; then return 2; fi; "
    "trap - DEBUG; shopt -u extdebug; return 0; }; exec %d>&1" % SAVED_OUTPUT_FD)
CHECK_STREAMS = (
    "if [ /proc/$$/fd/1 -ef /proc/$$/fd/{fd} ] && [ /proc/$$/fd/2 -ef /proc/$$/fd/{fd} ]; then __isb_fd=0; "
    "elif exec 1>&{fd} 2>&{fd}; then __isb_fd=1; else __isb_fd=2; fi".format(fd=SAVED_OUTPUT_FD))
ARM_ABORT = "trap 'shopt -s extdebug; trap __isb_unwind DEBUG' USR1"


class Collector(object):
    """Decodes command output as it streams and keeps at most `limit` characters:
    the whole text while it fits, else its head and tail, so a 20 MB line costs
    nothing but CPU and never crosses the channel."""

    def __init__(self, limit):
        self.limit = max(int(limit), 200)
        self.head_keep = self.limit // 2
        self.tail_keep = self.limit - self.head_keep
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.head = []
        self.head_len = 0
        self.tail = ""
        self.chars = 0
        self.bytes = 0
        self.clipped = False

    def feed(self, data, final=False):
        self.bytes += len(data)
        text = self.decoder.decode(data, final)
        if not text:
            return
        self.chars += len(text)
        if not self.clipped:
            self.head.append(text)
            self.head_len += len(text)
            if self.head_len <= self.limit:
                return
            whole = "".join(self.head)
            self.head = [whole[:self.head_keep]]
            self.tail = whole[self.head_keep:][-self.tail_keep:]
            self.clipped = True
            return
        self.tail += text
        if len(self.tail) > 4 * self.tail_keep:
            self.tail = self.tail[-self.tail_keep:]

    def result(self):
        """(head, tail, cut): the text is head + tail with `cut` characters missing
        between them; tail is "" and cut 0 when everything fit."""
        self.feed(b"", final=True)
        if not self.clipped:
            return "".join(self.head), "", 0
        tail = self.tail[-self.tail_keep:]
        return "".join(self.head), tail, self.chars - self.head_keep - len(tail)


def read_proc(pid, name):
    try:
        with open("/proc/%d/%s" % (pid, name), "rb") as f:
            return f.read()
    except (IOError, OSError):
        return None


def process_table():
    """pid -> (ppid, state, start time in clock ticks since boot) for every live process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = read_proc(int(entry), "stat")
        if not stat:
            continue
        # the command name is in parentheses and may itself contain spaces or ')'
        fields = stat[stat.rfind(b")") + 2:].split()
        table[int(entry)] = (int(fields[1]), fields[0].decode(), int(fields[19]))
    return table


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def is_live(pid, state):
    """Whether a process still runs code. State Z alone does not say it is dead: a thread-group leader
    that left with the raw exit system call shows Z while its other threads run on."""
    if state != "Z":
        return True
    try:
        return len(os.listdir("/proc/%d/task" % pid)) > 1
    except (IOError, OSError):
        return False


def zombie_child():
    """Whether a child of ours (orphans are, as PID 1) has exited and waits to be collected: a
    look that collects nothing (WNOWAIT), so that a scan of /proc is made only when there is one."""
    if not hasattr(os, "waitid"):  # Python 2: no way to look, scan
        return True
    try:
        return os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # no child at all
        return False
    except OSError:
        return True


OOM_COUNTERS = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")


def oom_kills():
    """How many processes the kernel has killed in this container for its memory limit
    (cgroup v2 or v1), or None where the count cannot be read."""
    for path in OOM_COUNTERS:
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (IOError, OSError, ValueError):
            continue
    return None


class Moment(object):
    """A point in the life of the container's processes: which ones started after it. Start
    times tick at 100 Hz, too coarse for two commands a few ms apart; within that blur the pid
    counter (pids are handed out in increasing order) decides."""

    def __init__(self):
        with open("/proc/uptime") as f:
            self.ticks = int(float(f.read().split()[0]) * CLOCK_TICKS)
        try:
            with open("/proc/sys/kernel/ns_last_pid") as f:
                self.last_pid = int(f.read())
        except (IOError, OSError, ValueError):
            self.last_pid = 0

    def precedes(self, pid, start_ticks):
        if start_ticks > self.ticks + 1:
            return True
        return start_ticks >= self.ticks - 1 and pid > self.last_pid


def descendants(table, roots):
    children = {}
    for pid, row in table.items():
        children.setdefault(row[0], []).append(pid)
    found, todo = set(), list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


KINDS = ((stat.S_ISREG, "file"), (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symlink"),
         (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
         (stat.S_ISBLK, "block device"))


def kind_of(mode):
    for test, name in KINDS:
        if test(mode):
            return name
    return "special file"


def read_regular(path, limit, follow):
    """(bytes, permission bits) of a regular file, or (None, None) when it holds more than
    `limit` bytes. Never blocks: a FIFO or device is refused before it is opened, and the
    open itself is non-blocking in case the path changed in between."""
    st = os.stat(path) if follow else os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise OSError("%s is a %s, not a regular file" % (path, kind_of(st.st_mode)))
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError("%s is a %s, not a regular file" % (path, kind_of(st.st_mode)))
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        return None, None
    return b"".join(chunks), st.st_mode & 0o7777


# ---------------------------------------------------------------------------------------------
# What keeps one sample from reaching the next through a reused container (see reset()).
#
# The model's processes run as the same root as this server. Non-dumpable, the server is out of
# their reach for everything the kernel guards with ptrace's rule (its memory, /proc/1/mem, its
# file descriptors, which are the channel to the host, its environment, ptrace itself), as long as
# they lack CAP_SYS_PTRACE (the host refuses to reuse a container given it). What the kernel lets
# any process of the same user change about this one (resource limits, CPU affinity, priority,
# OOM score...) is read at start and put back, or found changed, at every reset: a container
# whose server cannot be put back as it was is never reused.

PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4
IOPRIO_WHO_PROCESS = 1
IOPRIO_SYSCALLS = {"x86_64": (251, 252), "amd64": (251, 252), "aarch64": (30, 31), "arm64": (30, 31),
                   "riscv64": (30, 31)}  # machine -> (ioprio_set, ioprio_get)
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS = 0x80086601, 0x40086602
IPC_RMID = 0
# in-memory folders a sample may fill: emptied at every reset (their own metadata is kept as at start)
EMPTIED = ("/dev/shm", "/dev/mqueue", STATE_DIR)
# writable file systems whose contents this server can compare and put back (the root filesystem
# is the host's to restore; procfs holds nothing a sample can leave but this server's settings)
TRACKED_FS = ("tmpfs", "devtmpfs", "devpts", "mqueue")
KEPT_FS = ("proc",)
SMALL_FILE = 1 << 16  # a regular file on a tracked mount: kept in the baseline up to this size


class Libc(object):
    def __init__(self):
        self.lib = ctypes.CDLL(None, use_errno=True) if ctypes else None

    def call(self, name, *args):
        if self.lib is None:
            raise OSError(errno.ENOSYS, "ctypes is not available")
        rc = getattr(self.lib, name)(*args)
        if rc == -1:
            err = ctypes.get_errno()
            raise OSError(err, "%s: %s" % (name, os.strerror(err)))
        return rc


LIBC = Libc()


def ioprio_syscalls():
    return IOPRIO_SYSCALLS.get(platform.machine().lower())


def read_text(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except (IOError, OSError):
        return None


def write_text(path, text):
    with open(path, "w") as f:
        f.write(text)


def own_settings():
    """What this process's children inherit and any process of the container's user may change."""
    found = {}
    if resource is not None:
        for name in sorted(dir(resource)):
            if name.startswith("RLIMIT_"):
                try:
                    found["rlimit " + name] = list(resource.getrlimit(getattr(resource, name)))
                except (ValueError, OSError):
                    pass
    found["affinity"] = sorted(os.sched_getaffinity(0))
    found["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
    found["scheduler"] = os.sched_getscheduler(0)
    found["oom_score_adj"] = read_text("/proc/self/oom_score_adj")
    found["timerslack_ns"] = read_text("/proc/self/timerslack_ns")
    found["coredump_filter"] = read_text("/proc/self/coredump_filter")
    auto = read_text("/proc/self/autogroup")  # "/autogroup-12 nice 0"
    found["autogroup_nice"] = auto.split()[-1] if auto else None
    calls = ioprio_syscalls()
    if calls and LIBC.lib is not None:
        try:
            found["ioprio"] = LIBC.call("syscall", calls[1], IOPRIO_WHO_PROCESS, 0)
        except OSError:  # a kernel that does not have it (gVisor): unchecked, so never vouched for
            found["ioprio"] = None
    try:
        found["dumpable"] = LIBC.call("prctl", PR_GET_DUMPABLE, 0, 0, 0, 0)
    except OSError:
        found["dumpable"] = None
    return found


def put_setting(key, want):
    if key.startswith("rlimit "):
        resource.setrlimit(getattr(resource, key.split()[1]), tuple(want))
    elif key == "affinity":
        os.sched_setaffinity(0, want)
    elif key == "nice":
        os.setpriority(os.PRIO_PROCESS, 0, want)
    elif key == "scheduler":
        os.sched_setscheduler(0, want, os.sched_param(0))
    elif key == "oom_score_adj":
        write_text("/proc/self/oom_score_adj", want)
    elif key == "timerslack_ns":
        write_text("/proc/self/timerslack_ns", want)
    elif key == "coredump_filter":
        write_text("/proc/self/coredump_filter", want)
    elif key == "autogroup_nice":
        write_text("/proc/self/autogroup", want)
    elif key == "ioprio":
        LIBC.call("syscall", ioprio_syscalls()[0], IOPRIO_WHO_PROCESS, 0, want)
    elif key == "dumpable":
        LIBC.call("prctl", PR_SET_DUMPABLE, want, 0, 0, 0)


def put_settings_back(baseline):
    """Put back what changed since `baseline`; returns what could not be (as text)."""
    now = own_settings()
    if now == baseline:
        return []
    for key, want in baseline.items():
        if now.get(key) != want:
            try:
                put_setting(key, want)
            except (IOError, OSError, ValueError, TypeError):
                pass  # e.g. a lowered hard limit: only CAP_SYS_RESOURCE raises it again
    now = own_settings()
    return ["the server's %s is %s, not %s" % (key, now.get(key), want)
            for key, want in sorted(baseline.items()) if now.get(key) != want]


def unescape_mount(path):
    return path.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mount_table():
    """[(mount point, file system type, per-mount options)] of this mount namespace, in order."""
    rows = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            dash = parts.index("-")
            rows.append((unescape_mount(parts[4]), parts[dash + 1], parts[5]))
    return rows


def is_writable(options):
    return "rw" in options.split(",")


def entry_state(path, st):
    """What a tracked mount's entry is: type and metadata, link target, small file contents, xattrs, flags."""
    row = {"fmt": stat.S_IFMT(st.st_mode), "mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid, "gid": st.st_gid}
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        row["rdev"] = st.st_rdev
    elif stat.S_ISLNK(st.st_mode):
        row["target"] = os.readlink(path)
    elif stat.S_ISREG(st.st_mode):
        row["size"] = st.st_size
        if st.st_size <= SMALL_FILE:
            row["data"] = base64.b64encode(read_quietly(path, SMALL_FILE + 1)).decode("ascii")
    if not stat.S_ISLNK(st.st_mode):
        row["xattrs"] = read_xattrs(path)
    if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
        row["flags"] = inode_flags(path)
    return row


def read_quietly(path, limit):
    """Up to `limit` bytes of a file, without moving its access time (which the baseline holds)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_NOATIME", 0))
    except OSError as e:
        if e.errno != errno.EPERM:
            raise
        fd = os.open(path, flags)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def read_xattrs(path):
    out = {}
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return out
    for name in names:
        try:
            out[name] = base64.b64encode(os.getxattr(path, name, follow_symlinks=False)).decode("ascii")
        except OSError:
            out[name] = None
    return out


def inode_flags(path):
    """chattr's flags of a file or folder, None where the file system has none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY)
    except OSError:
        return None
    try:
        buf = bytearray(8)
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, buf, True)
        return int.from_bytes(bytes(buf[:4]), sys.byteorder)
    except (IOError, OSError):
        return None
    finally:
        os.close(fd)


def set_inode_flags(path, flags):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY)
    try:
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, bytearray(flags.to_bytes(4, sys.byteorder) + b"\0" * 4))
    finally:
        os.close(fd)


def under(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


class Mounts(object):
    """The container's mounts other than its root filesystem, as they were when the server started,
    and how to put the tracked ones back. `gaps`: why this container cannot be vouched for at all."""

    def __init__(self):
        self.table = mount_table()
        self.gaps = []
        self.trees = {}  # mount point -> {path: entry_state}
        points = [m for m, _, _ in self.table]
        for point, fstype, options in self.table:
            if point == "/" or not is_writable(options) or fstype in KEPT_FS:
                continue
            if fstype not in TRACKED_FS:
                self.gaps.append("%s (%s) is writable and this server cannot put it back" % (point, fstype))
                continue
            inner = set(p for p in points if p != point and under(p, point))
            self.trees[point] = (inner, self.snapshot(point, inner))

    def snapshot(self, point, inner):
        """{path: entry_state} of a mount's entries (not those of mounts inside it; an emptied
        mount's own folder only)."""
        tree = {}
        todo = [point]
        while todo:
            path = todo.pop()
            if path != point and (path in inner or self.dynamic(path)):
                continue
            try:
                st = os.lstat(path)
                tree[path] = entry_state(path, st)
                if stat.S_ISDIR(st.st_mode) and point not in EMPTIED:
                    todo.extend(os.path.join(path, n) for n in os.listdir(path))
            except (IOError, OSError):
                continue
        return tree

    @staticmethod
    def dynamic(path):
        """Pseudo-terminals come and go with the processes that open them."""
        return os.path.dirname(path) == "/dev/pts" and os.path.basename(path).isdigit()

    def put_back(self):
        """Restore every tracked mount's entries and metadata; returns what could not be."""
        problems = []
        if mount_table() != self.table:
            problems.append("the container's mounts changed")
        for point, (inner, tree) in self.trees.items():
            now = self.snapshot(point, inner)
            if now == tree:  # the usual case: the sample left it alone
                continue
            for path in sorted(set(now) - set(tree), key=len, reverse=True):
                remove_path(path)
            for path in sorted(tree, key=len):
                want = tree[path]
                if now.get(path) != want:
                    fix_entry(path, want)
            after = self.snapshot(point, inner)
            for path in sorted(set(after) | set(tree)):
                if after.get(path) != tree.get(path):
                    problems.append("%s could not be put back as it was" % path)
        return problems


def remove_path(path):
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


def fix_entry(path, want):
    """Make `path` what `want` says, as far as the server's privileges go."""
    try:
        st = os.lstat(path)
    except OSError:
        st = None
    try:
        if st is not None and stat.S_IFMT(st.st_mode) != want["fmt"]:
            remove_path(path)
            st = None
        if st is None:
            if stat.S_ISDIR(want["fmt"]):
                os.mkdir(path, 0o700)
            elif stat.S_ISLNK(want["fmt"]):
                os.symlink(want["target"], path)
            elif stat.S_ISREG(want["fmt"]) and "data" in want:
                with open(path, "wb") as f:
                    f.write(base64.b64decode(want["data"]))
            else:
                return  # a device node: making one needs CAP_MKNOD, which no one here has
        if stat.S_ISLNK(want["fmt"]):
            if os.readlink(path) != want["target"]:
                os.unlink(path)
                os.symlink(want["target"], path)
            os.lchown(path, want["uid"], want["gid"])
            return
        if stat.S_ISREG(want["fmt"]) and "data" in want:
            if base64.b64encode(read_quietly(path, SMALL_FILE + 1)).decode("ascii") != want["data"]:
                with open(path, "wb") as out:
                    out.write(base64.b64decode(want["data"]))
        os.lchown(path, want["uid"], want["gid"])
        os.chmod(path, want["mode"])
        have = read_xattrs(path)
        for name in have:
            if name not in want.get("xattrs", {}):
                os.removexattr(path, name)
        for name, value in want.get("xattrs", {}).items():
            if value is not None and have.get(name) != value:
                os.setxattr(path, name, base64.b64decode(value))
        if want.get("flags") is not None and inode_flags(path) != want["flags"]:
            set_inode_flags(path, want["flags"])
    except (IOError, OSError):
        pass  # put_back() finds what is still different


def sysv_objects(kind):
    """[(id, uid, cuid)] of the System V objects of a kind ("shm", "msg", "sem") in this IPC namespace."""
    try:
        with open("/proc/sysvipc/" + kind) as f:
            lines = f.read().splitlines()
    except (IOError, OSError):
        return []
    if not lines:
        return []
    head = lines[0].split()
    ident = head.index("shmid" if kind == "shm" else "msqid" if kind == "msg" else "semid")
    uid, cuid = head.index("uid"), head.index("cuid")
    out = []
    for line in lines[1:]:
        cols = line.split()
        if len(cols) > max(ident, uid, cuid):
            out.append((int(cols[ident]), int(cols[uid]), int(cols[cuid])))
    return out


def remove_sysv(kind, ident, owner):
    """IPC_RMID needs the owner's or creator's uid (or CAP_SYS_ADMIN, which no one here has):
    a child process takes that uid for the call."""
    call = {"shm": ("shmctl", (ident, IPC_RMID, None)), "msg": ("msgctl", (ident, IPC_RMID, None)),
            "sem": ("semctl", (ident, 0, IPC_RMID))}[kind]
    if owner == os.geteuid():
        LIBC.call(call[0], *call[1])
        return
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setresuid(owner, owner, owner)
            LIBC.call(call[0], *call[1])
            code = 0
        finally:
            os._exit(code)
    os.waitpid(pid, 0)


def remove_all_sysv():
    """Remove every System V object; returns (removed, how many are left)."""
    removed = 0
    for kind in ("shm", "msg", "sem"):
        for ident, uid, _ in sysv_objects(kind):
            try:
                remove_sysv(kind, ident, uid)
                removed += 1
            except (IOError, OSError):
                pass
    return removed, sum(len(sysv_objects(k)) for k in ("shm", "msg", "sem"))


class Guard(object):
    """The server's own protection, taken at start (before any sample), and checked at every reset."""

    def __init__(self):
        self.gaps = []
        try:
            LIBC.call("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)
        except OSError as e:
            self.gaps.append("the server could not make itself non-dumpable (%s)" % e)
        if resource is None or ctypes is None:
            self.gaps.append("this Python lacks ctypes or resource")
        self.settings = own_settings()
        if self.settings.get("ioprio") is None:
            self.gaps.append("the I/O priority cannot be read here (%s)" % platform.machine())
        if self.settings.get("dumpable") != 0:
            self.gaps.append("the server is dumpable")
        try:
            self.mounts = Mounts()
            self.gaps.extend(self.mounts.gaps)
        except (IOError, OSError, ValueError) as e:
            self.mounts = None
            self.gaps.append("the mount table could not be read (%s)" % e)

    def info(self):
        return {"dumpable": self.settings.get("dumpable"), "gaps": list(self.gaps)}

    def put_back(self):
        problems = put_settings_back(self.settings)
        if self.mounts is not None:
            problems += self.mounts.put_back()
        return problems


class Shell(object):
    """One persistent bash. stdout and stderr share a pipe (interleaved as in a
    terminal); bash reports each command's end on a separate control pipe."""

    def __init__(self, cwd=None):
        self.out_r, out_w = os.pipe()
        self.ctl_r, ctl_w = os.pipe()
        self.ctl_w = ctl_w

        def child_setup():
            # SIG_IGN is inherited across exec; give the model's programs normal signals.
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            # Under the memory limit, the OOM killer should pick the model's work, not us.
            try:
                with open("/proc/self/oom_score_adj", "w") as f:
                    f.write("500")
            except (IOError, OSError):
                pass

        env = dict(os.environ)
        env.update({"PAGER": "cat", "GIT_PAGER": "cat", "MANPAGER": "cat", "TERM": "dumb",
                    "PYTHONUNBUFFERED": "1", "DEBIAN_FRONTEND": "noninteractive"})
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, stdout=out_w, stderr=out_w,
            pass_fds=(ctl_w,), cwd=cwd if cwd and os.path.isdir(cwd) else None, env=env,
            preexec_fn=child_setup, close_fds=True,
            # a session of its own: its scheduling group (/proc/self/autogroup) is not the server's
            start_new_session=True)
        os.close(out_w)
        os.close(ctl_w)
        os.set_blocking(self.out_r, False)
        self.ctl_buf = b""
        self.ctl_eof = False
        self.cwd = cwd or os.getcwd()

    def send(self, line):
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def close(self):
        for fd in (self.out_r, self.ctl_r):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self.proc.kill()
            self.proc.wait()
        except OSError:
            pass


class Server(object):
    def __init__(self):
        self.shell = None
        self.channel = None  # the host's unix socket, when requests come that way (connect_channel)
        self.guard = None  # made by serve(), before the first sample
        self.count = 0
        self.out = sys.stdout.buffer if hasattr(sys.stdout, "buffer") else sys.stdout
        if not os.path.isdir(STATE_DIR):
            os.makedirs(STATE_DIR)

    # ---------------------------------------------------------------- shell runs
    def start_shell(self, cwd=None, restore=False):
        self.shell = Shell(cwd)
        self.shell.send(SHELL_INIT + "; " + ARM_ABORT)
        if restore:  # bring back exported variables and functions of the lost shell
            state = os.path.join(STATE_DIR, "state.sh")
            self.shell.send("source %s >/dev/null 2>&1; true" % state)

    def run(self, req):
        cmd = req.get("cmd", "")
        timeout = float(req.get("timeout") or 120)
        collector = Collector(req.get("limit") or 16000)
        if self.shell.proc.poll() is not None:  # died between commands (e.g. `kill $$ &`)
            self.restart_shell(self.shell)
        self.count += 1
        n = self.count
        if not os.path.isdir(STATE_DIR):
            os.makedirs(STATE_DIR)
        path = os.path.join(STATE_DIR, "cmd.sh")
        with open(path, "wb") as f:
            f.write(cmd.encode("utf-8", "surrogateescape"))
        sh = self.shell
        # `source` keeps cd/export/functions; stdin is /dev/null so nothing waits for input;
        # the control fd is closed for the command so background jobs do not inherit it.
        # the trailer re-arms the abort trap, in case the command replaced it
        line = ("export %s=%d; source %s < /dev/null %d>&- %d>&-; __isb_rc=$?; %s; %s; "
                "{ export -p; declare -f; } > %s/state.sh 2>/dev/null; "
                "printf '%%s %%s %%s\\0' \"$__isb_rc\" \"$__isb_fd\" \"$PWD\" >&%d"
                % (MARKER_VAR, n, path, sh.ctl_w, SAVED_OUTPUT_FD, ARM_ABORT, CHECK_STREAMS, STATE_DIR, sh.ctl_w))
        started = Moment()  # before bash sees the command: its processes all come after
        oom_before = oom_kills()
        try:
            sh.send(line)
        except (IOError, OSError):  # bash vanished just now: one fresh shell, one retry
            self.restart_shell(sh)
            sh = self.shell
            sh.send(line)
        start = time.time()
        deadline = start + timeout
        result = {"timed_out": False, "shell_restarted": False, "exit_code": None}
        done = self.wait_done(sh, collector, deadline)
        if done is None:  # timed out: unwind the command, kill its processes, keep the shell
            result["timed_out"] = True
            try:
                os.kill(sh.proc.pid, signal.SIGUSR1)
            except OSError:
                pass
            self.kill_command(sh, started)
            done = self.wait_done(sh, collector, time.time() + KILL_GRACE_S)
            if done is None:  # bash itself is busy (e.g. `while true; do :; done`)
                self.restart_shell(sh)
                result["shell_restarted"] = True
        if done == "died":
            rc = sh.proc.wait()
            result["exit_code"] = rc if rc >= 0 else 128 - rc  # killed by signal N -> 128+N
            result["shell_exited"] = True
            self.restart_shell(sh)
            result["shell_restarted"] = True
        elif isinstance(done, tuple):
            result["exit_code"], streams, sh.cwd = done
            if streams:  # 1: stdout/stderr were closed or redirected, now restored; 2: could not be
                result["streams_restored"] = True
                if streams == 2:
                    self.restart_shell(sh)
                    result["shell_restarted"] = True
            if result["timed_out"]:
                result["exit_code"] = None  # what bash saw was our unwinding, not the command's status
        oom_after = oom_kills()
        if oom_before is not None and oom_after is not None and oom_after > oom_before:
            result["oom_kills"] = oom_after - oom_before
        result["duration_s"] = round(time.time() - start, 6)
        result["output"], result["output_tail"], result["cut_chars"] = collector.result()
        result["total_chars"] = collector.chars
        result["total_bytes"] = collector.bytes
        result["cwd"] = self.shell.cwd
        # for the host's own look at what a timed-out command left (it decides by what it reads itself)
        result["shell_pid"] = self.shell.proc.pid
        result["started_last_pid"] = started.last_pid
        return result

    def wait_done(self, sh, collector, deadline):
        """Stream output until bash reports the end of the command.
        Returns (exit_code, streams, cwd), "died" when bash exited, or None at the deadline."""
        while True:
            if b"\0" in sh.ctl_buf:
                msg, sh.ctl_buf = sh.ctl_buf.split(b"\0", 1)
                self.drain(sh, collector)
                rc, streams, cwd = msg.decode("utf-8", "surrogateescape").split(" ", 2)
                return int(rc), int(streams or 0), cwd
            if sh.ctl_eof:
                self.drain(sh, collector)
                return "died"
            remaining = deadline - time.time()
            if remaining <= 0:
                self.drain(sh, collector)
                return None
            ready, _, _ = select.select([sh.out_r, sh.ctl_r], [], [], remaining)
            if sh.out_r in ready:
                self.drain(sh, collector)
            if sh.ctl_r in ready:
                data = os.read(sh.ctl_r, 4096)
                if data:
                    sh.ctl_buf += data
                else:  # no writer left: bash is gone (exit, exec, crash)
                    sh.ctl_eof = True

    @staticmethod
    def drain(sh, collector):
        while True:
            try:
                data = os.read(sh.out_r, 65536)
            except BlockingIOError:
                return
            except OSError:
                return
            if not data:
                return
            collector.feed(data)

    def kill_command(self, sh, started):
        """SIGKILL every process of the command that timed out. What decides is what the kernel keeps
        and a command cannot forge (an environment variable can be): when a process started and who
        its parent is. Every process started since the command began is the command's, unless it
        descends from one that was already running (a background job of an earlier command, which
        may fork at any time); a double fork that left the tree (its parent is now init) is the
        command's too."""
        spared = set([1, sh.proc.pid, os.getpid()])
        for _ in range(10):
            table = process_table()
            new = set(pid for pid, (_, _, start) in table.items() if pid not in spared and started.precedes(pid, start))
            old = set(table) - new - spared
            victims = set(pid for pid in new if not self.descends_from(table, pid, old, spared)
                          and is_live(pid, table[pid][1]))
            if not victims:
                return
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.05)

    @staticmethod
    def descends_from(table, pid, old, spared):
        """Whether pid's ancestry (as it is now) reaches a process of `old` before one of `spared`."""
        for _ in range(len(table)):
            parent = table.get(pid, (0,))[0]
            if parent in old:
                return True
            if parent in spared or parent not in table:
                return False
            pid = parent
        return False

    def restart_shell(self, sh):
        cwd = sh.cwd
        sh.close()
        self.start_shell(cwd, restore=True)

    # ---------------------------------------------------------------- other ops
    def exec_argv(self, req):
        """Run a program directly (no shell state), for the host's own helpers."""
        try:
            p = subprocess.run(req["argv"], input=(req.get("stdin") or "").encode(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=float(req.get("timeout") or 60), cwd=req.get("cwd"))
        except subprocess.TimeoutExpired:
            return {"exit_code": None, "timed_out": True, "stdout": "", "stderr": ""}
        except OSError as e:
            return {"exit_code": 127, "timed_out": False, "stdout": "", "stderr": str(e)}
        return {"exit_code": p.returncode, "timed_out": False,
                "stdout": p.stdout.decode("utf-8", "replace"), "stderr": p.stderr.decode("utf-8", "replace")}

    @staticmethod
    def read_file(req):
        """Bytes of a (small) regular file; the host uses the engine's archive API for big ones."""
        path, limit = req["path"], int(req.get("max_bytes") or 1 << 20)
        data, mode = read_regular(path, limit, follow=True)
        if data is None:
            return {"too_large": True}
        return {"data": base64.b64encode(data).decode("ascii"), "mode": mode}

    @staticmethod
    def read_many(req):
        """Several regular files in one reply (copy-back of small files). Each is opened without
        following a final symlink; a file that is no longer what the listing said gets an error."""
        out = []
        for item in req["files"]:
            try:
                data, _ = read_regular(item["path"], int(item["max_bytes"]), follow=False)
                if data is None:
                    out.append({"error": "grew past %d bytes" % int(item["max_bytes"])})
                else:
                    out.append({"data": base64.b64encode(data).decode("ascii")})
            except Exception as e:
                out.append({"error": "%s: %s" % (type(e).__name__, e)})
        return {"files": out}

    @staticmethod
    def write_file(req):
        path = req["path"]
        parent = os.path.dirname(path)
        if parent and not os.path.isdir(parent):
            os.makedirs(parent)
        try:
            st = os.stat(path)
        except OSError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise OSError("%s is a %s, not a regular file" % (path, kind_of(st.st_mode)))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_NOCTTY, 0o644)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between the check and the open
                raise OSError("%s is not a regular file" % path)
            data = memoryview(base64.b64decode(req["data"]))
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        if req.get("mode") is not None:
            os.chmod(path, int(req["mode"]))
        return {"size": os.path.getsize(path)}

    @staticmethod
    def stat_path(req):
        """A path as the model sees it (procfs and other mounts included, which the engine's
        archive API does not see). follow: the symlink chain resolved, and the real path."""
        path = req["path"]
        if req.get("follow"):
            real = os.path.realpath(path)
            try:
                st = os.stat(path)  # raises ELOOP for a loop of links
            except OSError as e:
                if e.errno != errno.ENOENT:
                    raise
                return {"exists": False, "path": real}
            return {"exists": True, "path": real, "kind": kind_of(st.st_mode), "size": st.st_size,
                    "mode": st.st_mode & 0o7777}
        try:
            st = os.lstat(path)
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise
            return {"exists": False, "path": path}
        out = {"exists": True, "path": path, "kind": kind_of(st.st_mode), "size": st.st_size,
               "mode": st.st_mode & 0o7777}
        if stat.S_ISLNK(st.st_mode):
            out["target"] = os.readlink(path)
        return out

    @staticmethod
    def list_tree(req):
        """Every entry under a folder, without following links: what copy-back decides on. At most
        max_entries (None: any number) and max_bytes of entries as JSON (each as the reply writes it,
        with a separator), so the reply stays within what the host reads; `truncated` when more were left."""
        root = req["path"]
        limit, room = req.get("max_entries"), int(req.get("max_bytes") or 4 * 1024 * 1024)
        if not os.path.isdir(root):
            return {"exists": os.path.exists(root), "entries": [], "truncated": False}
        entries, todo = [], [""]
        while todo:
            rel = todo.pop()
            try:
                names = sorted(os.listdir(os.path.join(root, rel) if rel else root))
            except OSError:
                continue
            for name in names:
                if limit is not None and len(entries) >= int(limit):
                    return {"exists": True, "entries": entries, "truncated": True}
                sub = rel + "/" + name if rel else name
                try:
                    st = os.lstat(os.path.join(root, sub))
                except OSError:
                    continue
                kind = kind_of(st.st_mode)
                entry = {"path": sub, "kind": kind, "size": st.st_size}
                if kind == "file" and st.st_nlink > 1:
                    entry["link_key"] = [st.st_dev, st.st_ino]
                elif kind == "symlink":
                    try:
                        entry["target"] = os.readlink(os.path.join(root, sub))
                    except OSError:
                        entry["target"] = "?"
                room -= len(json.dumps(entry)) + 2
                if room < 0:
                    return {"exists": True, "entries": entries, "truncated": True}
                entries.append(entry)
                if kind == "directory":
                    todo.append(sub)
        return {"exists": True, "entries": entries, "truncated": False}

    # ---------------------------------------------------------------- recycling
    def reset(self):
        """Between two samples: end every process but this server, empty the in-memory folders
        (/dev/shm, /dev/mqueue, our state folder), remove System V IPC, put back the other in-memory
        mounts (/dev...) and this server's own settings as they were at its start. The host then
        restores the filesystem and asks for a fresh shell. `left` (processes that would not die) and
        `problems` (what could not be put back): the host must discard the container."""
        if os.getpid() != 1:
            raise OSError("recycling needs the server to be the container's init process")
        if self.shell is not None:
            self.shell.close()
            self.shell = None
        killed, left = end_other_processes(5.0)
        problems = list(self.guard.gaps)
        cleared = 0
        for folder in EMPTIED:
            cleared += empty_folder(folder)
            if os.path.isdir(folder) and os.listdir(folder):
                problems.append("%s could not be emptied" % folder)
        ipc, ipc_left = remove_all_sysv()
        if ipc_left:
            problems.append("%d System V IPC object(s) could not be removed" % ipc_left)
        problems += self.guard.put_back()
        return {"killed": killed, "left": left, "cleared": cleared, "ipc_removed": ipc, "problems": problems}

    def reap(self):
        """As PID 1, collect orphans that exited; never touch our own shell."""
        if os.getpid() != 1 or not zombie_child():
            return
        own = set([self.shell.proc.pid]) if self.shell else set()
        for pid, (ppid, state, _) in process_table().items():
            if state == "Z" and ppid == 1 and pid not in own:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except OSError:
                    pass

    def handle(self, req):
        op = req.get("op")
        if op == RUN:
            return self.run(req)
        if op == EXEC:
            return self.exec_argv(req)
        if op == READ:
            return self.read_file(req)
        if op == READ_MANY:
            return self.read_many(req)
        if op == WRITE:
            return self.write_file(req)
        if op == LIST_TREE:
            return self.list_tree(req)
        if op == STAT:
            return self.stat_path(req)
        if op == RESET:
            return self.reset()
        if op == FRESH_SHELL:
            self.start_shell(req.get("cwd"))
            return {"pid": self.shell.proc.pid}
        if op == PING:
            return {"pid": os.getpid()}
        raise ValueError("unknown op %r" % (op,))

    def send(self, obj):
        self.out.write(json.dumps(obj).encode() + b"\n")
        self.out.flush()

    def connect_channel(self):
        """The host's unix socket (CHANNEL_SOCKET, set by the host in front of this source), when it gave
        one: requests and replies then bypass the engine's attach stream. Returns the fd to read requests
        from: the socket's, or stdin's where there is none or it cannot be reached (replies stay on stdout)."""
        path = globals().get("CHANNEL_SOCKET")
        if not path:
            return 0
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # not inherited by what we start
            sock.connect(path)
        except (IOError, OSError) as e:
            sys.stderr.write("insandbox: no channel socket (%s): replies on stdout\n" % (e,))
            return 0
        self.channel = sock
        self.out = SocketOut(sock)
        return sock.fileno()

    def serve(self):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # Everything is imported by now: later imports would load files a sample can write (and with
        # `python3 -c`, the working folder comes first on the path), so there are none.
        sys.path[:] = []
        fix_root_mode()
        self.guard = Guard()
        self.start_shell(os.getcwd())
        requests = queue.Queue()
        reader = threading.Thread(target=watch_host, args=(requests, self.connect_channel()))
        reader.daemon = True
        reader.start()
        self.send({"ready": True, "pid": os.getpid(), "python": sys.version.split()[0], "guard": self.guard.info()})
        while True:
            try:
                line = requests.get(timeout=2.0)
            except queue.Empty:
                self.reap()
                continue
            req = {}
            try:
                req = json.loads(line.decode("utf-8"))
                reply = self.handle(req)
                reply.update({"id": req.get("id"), "ok": True})
            except Exception as e:  # report, never die: the host decides what to do
                reply = {"id": req.get("id"), "ok": False, "error": "%s: %s" % (type(e).__name__, e)}
            self.send(reply)
            self.reap()


def fix_root_mode():
    """Give `/` mode 0755. Images built before that was fixed in image.py have a 0700 `/` (the
    debootstrap folder's), and Docker's btrfs and devicemapper drivers can hand out 0700 or 0777
    (moby#44106, #53500); 0700 locks every other user out (apt-get's `_apt` downloads fail)."""
    try:
        if os.stat("/").st_mode & 0o7777 != 0o755:
            os.chmod("/", 0o755)
    except OSError:
        pass


class SocketOut(object):
    """Replies written whole to the channel socket (a send may take part of a big reply)."""

    def __init__(self, sock):
        self.sock = sock

    def write(self, data):
        self.sock.sendall(data)

    def flush(self):
        pass


def watch_host(requests, fd=0):
    """Read requests from the host (stdin, or the channel socket) for the main thread; at EOF the
    host is gone (killed, crashed, or done without closing): end everything now, whatever is running."""
    buf = b""
    while True:
        try:
            data = os.read(fd, 1 << 20)
        except OSError:
            data = b""
        if not data:
            break
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                requests.put(line)
    kill_everything_else()
    os._exit(0)


def end_other_processes(wait_s):
    """SIGKILL every process but this one, again and again (a fork bomb keeps forking), reaping
    them as init, until none is left or wait_s passed. Returns (killed, left)."""
    me, killed, deadline = os.getpid(), set(), time.time() + wait_s
    while True:
        alive = [pid for pid, (_, state, _) in process_table().items() if pid != me and is_live(pid, state)]
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        while True:  # collect the dead
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except OSError:  # no children left
                break
            if pid == 0:
                break
        if not alive:
            return len(killed), 0
        if time.time() > deadline:
            return len(killed), len(alive)
        time.sleep(0.01)


def empty_folder(folder):
    """Remove what is in folder (not the folder: it is a mount point); returns how many entries."""
    try:
        names = os.listdir(folder)
    except (IOError, OSError):
        return 0
    for name in names:
        path = os.path.join(folder, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except (IOError, OSError):
            pass
    return len(names)


def kill_everything_else():
    """As PID 1 our exit takes every process of the container with it; elsewhere (tests, an
    init process in front of us) make sure nothing the model started outlives us."""
    me = os.getpid()
    for pid in process_table():
        if pid not in (me, 1):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


if __name__ == "__main__" or __name__ == "builtins":
    Server().serve()
