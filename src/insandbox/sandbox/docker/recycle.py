"""Putting a used container's filesystem back to the image's state, so the next sample can have it.

Starting a container costs the Docker engine ~100 ms of work it does one container at a time,
so a fresh container per sample caps a machine near 10 samples a second whatever the
concurrency. Recycling skips the engine: once the in-container server has killed every
process (server.py, `reset`), this module undoes the sample's changes to the filesystem, and
the server gives the next sample a fresh shell.

What changed is exactly what the container's overlay upper layer holds: new and modified
files, whiteouts for deleted ones, opaque folders for replaced ones. Each of those paths is put
back through the container's merged view (the very mount its processes see, so the overlay's
own rules apply; the upper layer is only read): new paths are removed, modified or deleted
ones are copied again from the image's layers (read here with overlayfs' rules: whiteouts,
opaque folders, the top layer wins), folders get their mode, owner and times back. A restored
file's copy stays in the upper layer; its inode and ctime are remembered, so a later reset
skips it unless it was touched again (ctime cannot be set from user space). Those copies take
the container's disk (a sample that only touched 380 MB of the image's files left the next one
80% of a 500 MB disk): after the restore the layer's use is measured from this machine and a
container that keeps more than a small slack beyond its start's is not reused.

The sandbox's processes are all dead while this runs, and every path is reached through
folder file descriptors opened with O_NOFOLLOW: a symbolic link the model left (say
`/testbed/x -> /`) can never lead this root process out of the container's tree.

Needs: root, an engine on this machine, the overlay2 driver, its merged view mounted where
this process sees it (restorer_for() says why not).
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Optional

from ...core.errors import InternalSignal

OVERLAY_XATTR = "trusted.overlay."
OPAQUE = "trusted.overlay.opaque"
REDIRECT = "trusted.overlay.redirect"
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
COPY_CHUNK = 1 << 20
# what a restore may leave taken on the container's disk beyond a fresh container's (restored copies of
# small files, a folder's grown listing): past it the container is not reused
DISK_SLACK_BYTES = 1 << 20
DISK_SLACK_INODES = 64
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS = 0x80086601, 0x40086602
# chattr's flags a file's owner may change (not e.g. "extents", which the file system keeps)
USER_FLAGS = (0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20 | 0x40 | 0x80 | 0x4000 | 0x8000 | 0x10000 | 0x20000 | 0x800000
              | 0x20000000)


@dataclass(frozen=True)
class Extras:
    """What a folder carries beyond mode, owner and times: extended attributes (ACLs are some) and
    chattr's flags."""

    xattrs: tuple[tuple[str, bytes], ...]
    flags: Optional[int]


def extras_of(where) -> Extras:
    """A folder's Extras, from an open descriptor or a path (the image's layers)."""
    fd = where if isinstance(where, int) else os.open(where, DIR_FLAGS)
    try:
        names = sorted(n for n in os.listxattr(fd) if not n.startswith(OVERLAY_XATTR))
        xattrs = tuple((n, os.getxattr(fd, n)) for n in names)
        try:
            buf = bytearray(8)
            fcntl.ioctl(fd, FS_IOC_GETFLAGS, buf, True)
            flags: Optional[int] = int.from_bytes(bytes(buf[:4]), sys.byteorder) & USER_FLAGS
        except OSError:
            flags = None
        return Extras(xattrs, flags)
    finally:
        if not isinstance(where, int):
            os.close(fd)


def put_extras(fd: int, want: Extras) -> None:
    """Give an open folder these Extras (raises when the kernel refuses: the container is then not reused)."""
    have = extras_of(fd)
    if have == want:
        return
    wanted = dict(want.xattrs)
    for name, _ in have.xattrs:
        if name not in wanted:
            os.removexattr(fd, name)
    for name, value in want.xattrs:
        if dict(have.xattrs).get(name) != value:
            os.setxattr(fd, name, value)
    if want.flags is not None and have.flags != want.flags:
        buf = bytearray(8)
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, buf, True)
        now = int.from_bytes(bytes(buf[:4]), sys.byteorder)
        flags = (now & ~USER_FLAGS) | want.flags
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, bytearray(flags.to_bytes(4, sys.byteorder) + bytes(4)))
    if extras_of(fd) != want:
        raise RestoreError(errno.EPERM, "a folder's extended attributes or flags could not be put back")


class RestoreError(InternalSignal, OSError):
    """The filesystem could not be put back: the container must not be reused."""


@dataclass
class RestoreStats:
    removed: int = 0  # paths the sample created, removed
    restored: int = 0  # paths copied again from the image (modified or deleted ones, their contents)
    restored_bytes: int = 0
    kept: int = 0  # copies restored by an earlier reset and untouched since
    fixed_dirs: int = 0  # folders whose mode, owner or times were put back
    restore_s: float = 0.0

    def as_dict(self) -> dict:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in vars(self).items()}


def is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _xattr(path, name: str, dir_fd: Optional[int] = None) -> Optional[bytes]:
    try:
        if dir_fd is not None:  # getxattr has no dir_fd: go through /proc's view of the folder
            path = f"/proc/self/fd/{dir_fd}/{path}"
        return os.getxattr(path, name, follow_symlinks=False)
    except OSError:
        return None


def _lstat(path) -> Optional[os.stat_result]:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None


class LayerView:
    """The image as the container first saw it: its read-only layers (top first), read with
    overlayfs' rules. Paths are relative to the root, without a leading slash."""

    def __init__(self, lowers: list[str]):
        self.lowers = [Path(p) for p in lowers]
        self._stack = lru_cache(maxsize=4096)(self._stack_uncached)

    def _stack_uncached(self, rel: str) -> tuple[Path, ...]:
        """The layers that hold folder `rel` as a folder, top first (empty: not a folder of the image)."""
        if rel == "":
            out = []
            for layer in self.lowers:
                out.append(layer)
                if _xattr(layer, OPAQUE) == b"y":
                    break
            return tuple(out)
        parent = self._stack(os.path.dirname(rel))
        out = []
        for layer in parent:
            p = layer / rel
            st = _lstat(p)
            if st is None:
                continue
            if is_whiteout(st) or not stat.S_ISDIR(st.st_mode):
                break  # hides the folders of the layers below
            out.append(layer)
            if _xattr(p, OPAQUE) == b"y":
                break
        return tuple(out)

    def entry(self, rel: str) -> Optional[Path]:
        """Where the image's entry at `rel` lives (the top one), or None when the image has none."""
        for layer in self._stack(os.path.dirname(rel)):
            p = layer / rel
            st = _lstat(p)
            if st is None:
                continue
            return None if is_whiteout(st) else p
        return None

    def listdir(self, rel: str) -> dict[str, Path]:
        """The image's entries of folder `rel`: name -> where it lives."""
        found: dict[str, Path] = {}
        hidden: set[str] = set()
        for layer in self._stack(rel):
            with os.scandir(layer / rel) as it:
                for e in it:
                    if e.name in found or e.name in hidden:
                        continue
                    if is_whiteout(e.stat(follow_symlinks=False)):
                        hidden.add(e.name)
                    else:
                        found[e.name] = Path(e.path)
        return found


@dataclass
class Restorer:
    """Restores one container's filesystem; `known` survives between its resets."""

    upper: Path
    merged: Path
    view: LayerView
    known: dict[str, tuple[int, int]] = field(default_factory=dict)  # rel -> (inode, ctime_ns) in upper
    baseline: dict[str, os.stat_result] = field(default_factory=dict)  # the engine's own folders in upper
    baseline_extras: dict[str, Extras] = field(default_factory=dict)  # theirs, and "" for the root folder
    baseline_links: dict[str, str] = field(default_factory=dict)  # the engine's own symbolic links: their targets
    root_stat: Optional[os.stat_result] = None  # "/" itself, as at start
    stats: RestoreStats = field(default_factory=RestoreStats)
    disk_at_start: Optional[tuple[int, int]] = None  # (bytes, inodes) the upper layer took right after the start

    def note_baseline(self) -> None:
        """Right after the start: what the engine itself put in the upper layer (mount points such as
        /run/insandbox for the server's tmpfs) is part of the state to come back to. Removing such
        a folder from here would detach the mount inside the container."""
        for top, dirs, files in os.walk(self.upper):
            for name in dirs + files:
                path = os.path.join(top, name)
                rel = os.path.relpath(path, self.upper)
                st = os.lstat(path)
                self.baseline[rel] = st
                if not stat.S_ISDIR(st.st_mode):
                    self.known[rel] = (st.st_ino, st.st_ctime_ns)
                    if stat.S_ISLNK(st.st_mode):
                        self.baseline_links[rel] = os.readlink(path)
                else:
                    self.baseline_extras[rel] = extras_of(str(self.merged / rel))
        # "/" itself: its mode, owner (the server has set its mode by now) and extras
        self.root_stat = os.stat(self.merged)
        self.baseline_extras[""] = extras_of(str(self.merged))
        self.disk_at_start = self.disk_used()

    def disk_used(self) -> tuple[int, int]:
        """(bytes, inodes) the container's writable layer takes, as this machine counts them: its own
        file system's figures where it has one (disk.py), else its files' blocks added up."""
        if os.path.ismount(self.upper.parent):
            st = os.statvfs(self.upper)
            return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_files - st.f_ffree
        blocks = inodes = 0
        for top, dirs, files in os.walk(self.upper):
            for name in dirs + files:
                blocks += os.lstat(os.path.join(top, name)).st_blocks
                inodes += 1
        return blocks * 512, inodes

    def check_disk(self) -> None:
        """A reused container must offer its next sample the space a fresh one does: a restored copy stays
        in the writable layer (the overlay cannot drop it while mounted), so past a small slack the
        container is not reused (RestoreError)."""
        if self.disk_at_start is None:
            return
        (b0, i0), (b1, i1) = self.disk_at_start, self.disk_used()
        if b1 > b0 + DISK_SLACK_BYTES or i1 > i0 + DISK_SLACK_INODES:
            raise RestoreError(errno.ENOSPC, f"the last sample's changes keep {(b1 - b0) / (1 << 20):.1f} MiB and "
                                             f"{i1 - i0} inodes of the container's disk after the restore (a fresh "
                                             f"one would offer its next sample more)")

    def restore(self) -> RestoreStats:
        self.stats = RestoreStats()
        t0 = time.perf_counter()
        root = os.open(self.merged, DIR_FLAGS)
        try:
            self._walk("", root)
            self._engine_files_back(root)
            if self.root_stat is not None:
                self._fix_dir(root, self.root_stat, self.baseline_extras.get(""))
        finally:
            os.close(root)
        self.check_disk()
        self.stats.restore_s = time.perf_counter() - t0
        return self.stats

    # ---------------------------------------------------------------- the walk
    def _walk(self, rel: str, mfd: int) -> None:
        """Undo the changes under folder `rel` (mfd: the merged folder, open)."""
        try:
            entries = list(os.scandir(self.upper / rel)) if rel else list(os.scandir(self.upper))
        except FileNotFoundError:
            return
        for e in entries:
            name, sub = e.name, f"{rel}/{e.name}" if rel else e.name
            ust = e.stat(follow_symlinks=False)
            base = self.baseline.get(sub)
            if base is not None and stat.S_ISDIR(base.st_mode) and stat.S_ISDIR(ust.st_mode):
                self._descend(mfd, name, sub, base, self.baseline_extras.get(sub))  # the engine's: as it was
                continue
            image = self.view.entry(sub)
            ist = os.lstat(image) if image is not None else None
            if is_whiteout(ust):  # deleted by the sample
                if image is not None:
                    self._copy(image, ist, sub, mfd, name)
                continue
            if image is None and base is not None:  # the engine's own file, not the image's (Podman: /etc/mtab)
                if self.known.get(sub) != (ust.st_ino, ust.st_ctime_ns):
                    self._remove(mfd, name)
                    self._engine_file(sub, mfd, name)
                else:  # untouched; removing a mount point's file here would unmount it inside
                    self.stats.kept += 1
                continue
            if image is None:  # created by the sample
                self._remove(mfd, name)
                self.stats.removed += 1
                continue
            if stat.S_ISDIR(ust.st_mode) and stat.S_ISDIR(ist.st_mode):
                replaced = (_xattr(e.path, OPAQUE) == b"y" or _xattr(e.path, REDIRECT) is not None)
                if replaced:  # the image's contents are hidden: start the folder again
                    self._remove(mfd, name)
                    self._copy(image, ist, sub, mfd, name)
                    continue
                self._descend(mfd, name, sub, ist, extras_of(str(image)))
                continue
            if self.known.get(sub) == (ust.st_ino, ust.st_ctime_ns):
                self.stats.kept += 1  # our own copy from an earlier reset, untouched since
                continue
            self._remove(mfd, name)
            self._copy(image, ist, sub, mfd, name)

    def _descend(self, mfd: int, name: str, rel: str, meta: os.stat_result, extras: Optional[Extras]) -> None:
        """Undo the changes inside a folder that stays, then give it `meta`'s mode, owner and times, and
        its extended attributes and flags."""
        cfd = os.open(name, DIR_FLAGS, dir_fd=mfd)
        try:
            self._walk(rel, cfd)
            self._fix_dir(cfd, meta, extras)
        finally:
            os.close(cfd)

    def _engine_files_back(self, root: int) -> None:
        """The engine's own files (not the image's) that the sample deleted: back as at start."""
        for rel, st in self.baseline.items():
            if stat.S_ISDIR(st.st_mode) or _lstat(self.upper / rel) is not None or self.view.entry(rel) is not None:
                continue
            fd, parts = root, rel.split("/")
            try:
                for part in parts[:-1]:
                    nfd = os.open(part, DIR_FLAGS, dir_fd=fd)
                    if fd != root:
                        os.close(fd)
                    fd = nfd
                self._engine_file(rel, fd, parts[-1])
            finally:
                if fd != root:
                    os.close(fd)

    def _engine_file(self, rel: str, dfd: int, name: str) -> None:
        """Make the engine's own file `rel` again as `name` in dfd: a symbolic link can be; anything else
        the sample changed cannot, and the container is not reused."""
        st, target = self.baseline[rel], self.baseline_links.get(rel)
        if target is None:
            raise RestoreError(errno.ENOTSUP, f"/{rel}, a file of the engine's own, was changed")
        os.symlink(target, name, dir_fd=dfd)
        os.chown(name, st.st_uid, st.st_gid, dir_fd=dfd, follow_symlinks=False)
        os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=dfd, follow_symlinks=False)
        ust = os.lstat(self.upper / rel)
        self.known[rel] = (ust.st_ino, ust.st_ctime_ns)
        self.stats.restored += 1

    # ---------------------------------------------------------------- operations (all relative to a folder fd)
    def _remove(self, dfd: int, name: str) -> None:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            self._rmtree(dfd, name)
        else:
            os.unlink(name, dir_fd=dfd)

    def _rmtree(self, dfd: int, name: str) -> None:
        fd = os.open(name, DIR_FLAGS, dir_fd=dfd)
        try:
            for child in os.listdir(fd):
                st = os.stat(child, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    self._rmtree(fd, child)
                else:
                    os.unlink(child, dir_fd=fd)
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=dfd)

    def _copy(self, src: Path, st: os.stat_result, rel: str, dfd: int, name: str) -> None:
        """Recreate the image's entry `rel` (at src) as `name` in the merged folder dfd."""
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            os.mkdir(name, 0o700, dir_fd=dfd)
            cfd = os.open(name, DIR_FLAGS, dir_fd=dfd)
            try:
                for child, where in self.view.listdir(rel).items():
                    self._copy(where, os.lstat(where), f"{rel}/{child}", cfd, child)
                self._meta(src, st, cfd)
            finally:
                os.close(cfd)
        elif stat.S_ISREG(mode):
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                          dir_fd=dfd)
            try:
                with open(src, "rb") as f:
                    while chunk := f.read(COPY_CHUNK):
                        os.write(out, chunk)
                self._meta(src, st, out)
            finally:
                os.close(out)
            self.stats.restored_bytes += st.st_size
        elif stat.S_ISLNK(mode):
            os.symlink(os.readlink(src), name, dir_fd=dfd)
            os.chown(name, st.st_uid, st.st_gid, dir_fd=dfd, follow_symlinks=False)
            os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=dfd, follow_symlinks=False)
        else:  # FIFO, socket, device node
            os.mknod(name, mode, st.st_rdev, dir_fd=dfd)
            os.chown(name, st.st_uid, st.st_gid, dir_fd=dfd, follow_symlinks=False)
            os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=dfd, follow_symlinks=False)
        self.stats.restored += 1
        if not stat.S_ISDIR(mode):
            try:
                ust = os.lstat(self.upper / rel)
                self.known[rel] = (ust.st_ino, ust.st_ctime_ns)
            except OSError:
                pass

    @staticmethod
    def _meta(src: Path, st: os.stat_result, fd: int) -> None:
        """Owner, mode (setuid bits after chown, which clears them), extended attributes (file
        capabilities: ping's cap_net_raw), times, on an open file or folder."""
        os.chown(fd, st.st_uid, st.st_gid)
        os.chmod(fd, stat.S_IMODE(st.st_mode))
        try:
            names = os.listxattr(src, follow_symlinks=False)
        except OSError:
            names = []
        for attr in names:
            if attr.startswith(OVERLAY_XATTR):
                continue
            try:
                os.setxattr(fd, attr, os.getxattr(src, attr, follow_symlinks=False))
            except OSError as e:
                if e.errno not in (errno.ENOTSUP, errno.EPERM):
                    raise
        os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))

    def _fix_dir(self, fd: int, ist: os.stat_result, extras: Optional[Extras] = None) -> None:
        """A folder that stayed: its mode, owner, modification time, extended attributes (ACLs) and
        flags as in the image (creating and removing entries in it moved its mtime)."""
        changed = False
        if extras is not None and extras_of(fd) != extras:
            put_extras(fd, extras)
            changed = True
        cur = os.fstat(fd)
        if (cur.st_uid, cur.st_gid) != (ist.st_uid, ist.st_gid):
            os.chown(fd, ist.st_uid, ist.st_gid)
            changed = True
        if stat.S_IMODE(cur.st_mode) != stat.S_IMODE(ist.st_mode):
            os.chmod(fd, stat.S_IMODE(ist.st_mode))
            changed = True
        if cur.st_mtime_ns != ist.st_mtime_ns:
            os.utime(fd, ns=(ist.st_atime_ns, ist.st_mtime_ns))
            changed = True
        self.stats.fixed_dirs += changed


def restorer_for(inspect: dict) -> Restorer:
    """A Restorer for a container, from the engine's inspect of it (raises RestoreError when its
    layers are not where this process can work on them)."""
    data = (inspect.get("GraphDriver") or {}).get("Data") or {}
    upper, merged, lower = data.get("UpperDir"), data.get("MergedDir"), data.get("LowerDir")
    if not (upper and merged and lower):
        raise RestoreError(errno.ENOTSUP, "the container's storage is not overlay2 with an image below")
    if not os.path.ismount(merged):
        raise RestoreError(errno.ENOENT, f"the container's root ({merged}) is not mounted where this process "
                                         "sees it (is the engine in another mount namespace?)")
    return Restorer(Path(upper), Path(merged), LayerView(lower.split(":")))
