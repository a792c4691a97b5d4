"""Root filesystems on this host, for a backend that runs an image's files without an engine (bwrap).

A root filesystem is a folder `root/` (the image's files) with `image.json` beside it (the image's
name, id, environment and working folder). The bwrap backend runs it as the sandbox's lower layer, so
it must belong to the user who runs the sandboxes: in a user namespace only that user's own files
are root's files (anyone else's show as `nobody`, and root inside could not write over them).

Where one comes from, in this order:
- `INSANDBOX_ROOTFS=PATH`: a folder in the layout above (`insandbox image export`), a plain root
  tree (debootstrap's), or a tar of one (`docker export`, or an export's tar): used in place when it
  is a folder of this user's, else unpacked once into the cache;
- the cache (`~/.cache/insandbox/rootfs/`, or `INSANDBOX_ROOTFS_CACHE`): the newest entry made from
  the image;
- a Docker engine on this machine, if one answers: the image exported into the cache once.

Unpacking keeps what a sandbox needs and nothing that is dangerous on the host: device nodes are
left out (the sandbox gets its own /dev), setuid and setgid bits are dropped (a setuid-root file in
a root user's cache would be one for every local user who can reach it), paths never leave the
folder (no `..`, no absolute names, nothing under a link), and every file is the unpacking user's
(the one uid the sandbox's user namespace maps, its root).
"""
from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Optional

from .base import SetupError

ROOTFS_ENV = "INSANDBOX_ROOTFS"
CACHE_ENV = "INSANDBOX_ROOTFS_CACHE"
TREE, META = "root", "image.json"
META_MEMBER = ".insandbox-image.json"  # image.json carried at the top of an exported tar
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# apt drops to its `_apt` user to download; a user namespace with one uid mapped has no `_apt`
APT_CONF = ("etc/apt/apt.conf.d/00insandbox-rootless",
            b'// insandbox: one uid in the sandbox\'s user namespace, no _apt to drop to\nAPT::Sandbox::User "root";\n')


@dataclass
class RootFS:
    tree: Path  # the image's files, this user's
    image: str = ""
    id: str = ""  # the image id it was exported from, or where it came from
    env: dict[str, str] = field(default_factory=lambda: {"PATH": DEFAULT_PATH})
    workdir: str = ""
    source: str = ""

    def info(self) -> dict:
        return {"rootfs": str(self.tree), "image_id": self.id, "source": self.source}


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "insandbox" / "rootfs"


def image_meta(image: str, image_id: str, config: dict, source: str) -> dict:
    """image.json from an image's config (the engine's inspect: Env, WorkingDir)."""
    env = dict(e.split("=", 1) for e in (config.get("Env") or []) if "=" in e)
    return {"image": image, "id": image_id, "env": env, "workdir": config.get("WorkingDir") or "", "source": source,
            "created": int(time.time())}


def _load(entry: Path) -> Optional[RootFS]:
    """The root filesystem in an entry (root/ and image.json), or None when it is not one (yet)."""
    try:
        meta = json.loads((entry / META).read_text())
    except (OSError, ValueError):
        return None
    if not (entry / TREE).is_dir():
        return None
    return RootFS(tree=entry / TREE, image=meta.get("image", ""), id=meta.get("id", ""),
                  env={"PATH": DEFAULT_PATH, **(meta.get("env") or {})}, workdir=meta.get("workdir", ""),
                  source=meta.get("source", ""))


def own_tree(tree: Path) -> bool:
    """Every file a sandbox writes over is this user's (checked where a tree shows it: its top, /usr, /etc)."""
    me = os.geteuid()
    try:
        return all(os.lstat(tree / sub).st_uid == me for sub in ("", "usr", "etc") if os.path.lexists(tree / sub))
    except OSError:
        return False


# ---------------------------------------------------------------------- unpacking
def _member_ok(m: tarfile.TarInfo, dest: Path, names: set[str]) -> Optional[tarfile.TarInfo]:
    """The member as it may be unpacked under dest, or None to leave it out."""
    name = os.path.normpath(m.name.lstrip("/"))
    if name in (".", "..", "") or name.startswith("../") or os.path.isabs(name):
        return None
    if m.ischr() or m.isblk():  # the sandbox's /dev is its own
        return None
    parent = os.path.realpath(dest / os.path.dirname(name))  # nothing unpacked through a link
    if parent != str(dest) and not parent.startswith(str(dest) + os.sep):
        return None
    if m.islnk():  # a hard link to a member unpacked before, nowhere else
        target = os.path.normpath(m.linkname.lstrip("/"))
        if target not in names:
            return None
    else:
        target = m.linkname
    m = copy.copy(m)
    m.name, m.linkname = name, target
    m.mode &= ~(stat.S_ISUID | stat.S_ISGID)
    if m.isdir():
        m.mode |= stat.S_IRWXU  # its owner must be able to fill it (and remove it)
    return m


def unpack(stream: IO[bytes], dest: Path) -> dict:
    """Unpack a root filesystem's tar (a stream; read once) into dest; returns the image.json it
    carried, if any."""
    dest = Path(os.path.realpath(dest))
    dest.mkdir(parents=True, exist_ok=True)
    meta: dict = {}
    names: set[str] = set()

    with tarfile.open(fileobj=stream, mode="r|*") as tar:
        def members() -> Iterator[tarfile.TarInfo]:
            for m in tar:
                if os.path.normpath(m.name.lstrip("/")) == META_MEMBER and m.isfile():
                    meta.update(json.loads(tar.extractfile(m).read()))
                    continue
                ok = _member_ok(m, dest, names)
                if ok is not None:
                    names.add(ok.name)
                    yield ok

        # one uid in the sandbox's user namespace: every file is the unpacking user's (as root too: an owner
        # kept, e.g. apt's _apt, would be unmapped in the sandbox, and root there could not write its files)
        tar.chown = lambda *args, **kwargs: None
        kwargs = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}  # checked above
        tar.extractall(dest, members=members(), **kwargs)
    conf = dest / APT_CONF[0]
    if (dest / "etc/apt").is_dir() and not (dest / "etc/apt").is_symlink() and not os.path.lexists(conf):
        conf.parent.mkdir(exist_ok=True)
        conf.write_bytes(APT_CONF[1])
    return meta


@contextlib.contextmanager
def _locked(key: str) -> Iterator[Path]:
    """The cache, with this entry's lock held (another process preparing it makes this one wait)."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield root


def _make_entry(key: str, fill: Callable[[Path], dict], on_status: Callable[[str], None], what: str) -> RootFS:
    """The cache entry `key`, made by fill(tree folder) -> image.json unless there already."""
    with _locked(key) as root:
        entry = root / key
        found = _load(entry)
        if found is not None:
            return found
        on_status(f"unpacking the root filesystem of {what} into {entry} (once)")
        for stale in root.glob(f".{key}.partial-*"):
            remove_tree(stale)
        partial = root / f".{key}.partial-{os.getpid()}"
        try:
            meta = fill(partial / TREE)
            (partial / META).write_text(json.dumps(meta, indent=1) + "\n")
            if entry.exists():
                remove_tree(entry)
            os.rename(partial, entry)
        except BaseException:
            remove_tree(partial)
            raise
    found = _load(entry)
    assert found is not None
    return found


def _tar_key(path: Path) -> str:
    st = path.stat()
    return "tar-" + hashlib.sha256(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}".encode()
                                   ).hexdigest()[:16]


def from_tar(path: Path, on_status: Callable[[str], None]) -> RootFS:
    def fill(tree: Path) -> dict:
        with open(path, "rb") as f:
            meta = unpack(f, tree)
        return {**meta, "source": f"tar {path}" + (f" ({meta['source']})" if meta.get("source") else "")}

    return _make_entry(_tar_key(path), fill, on_status, str(path))


def from_folder(path: Path, on_status: Callable[[str], None]) -> RootFS:
    """A folder in the export layout or a plain root tree: in place when it is this user's, else a
    copy of one's own (through tar, so the same rules apply)."""
    layout = _load(path)
    tree = layout.tree if layout else path
    if not (tree / "bin").exists() and not (tree / "usr").is_dir():
        raise SetupError(f"{ROOTFS_ENV}={path}: not a root filesystem (no bin/ or usr/ in {tree})")
    if own_tree(tree):
        return layout or RootFS(tree=tree, id=str(path), source=f"folder {path}")
    key = "dir-" + hashlib.sha256(f"{path.resolve()}:{(layout.id if layout else '')}:"
                                  f"{tree.stat().st_mtime_ns}".encode()).hexdigest()[:16]

    def fill(dest: Path) -> dict:
        proc = subprocess.Popen(["tar", "-C", str(tree), "-cf", "-", "."], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        try:
            unpack(proc.stdout, dest)
        finally:
            proc.stdout.close()
            err = proc.stderr.read().decode(errors="replace")
            proc.wait()
        if proc.returncode not in (0, None):
            raise SetupError(f"cannot read the root filesystem {tree}: {err.strip()[-500:]}")
        base = {"image": layout.image, "id": layout.id, "env": layout.env, "workdir": layout.workdir} if layout else {}
        return {**base, "source": f"copy of {path}"}

    return _make_entry(key, fill, on_status, str(path))


def from_setting(on_status: Callable[[str], None]) -> Optional[RootFS]:
    """What INSANDBOX_ROOTFS names, ready to run (None when it is not set)."""
    value = os.environ.get(ROOTFS_ENV, "").strip()
    if not value:
        return None
    path = Path(value).expanduser()
    if path.is_dir():
        return from_folder(path, on_status)
    if path.is_file():
        return from_tar(path, on_status)
    raise SetupError(f"{ROOTFS_ENV}={value}: no such folder or tar file")


def cached(image: str) -> Optional[RootFS]:
    """The newest cache entry exported from `image` (by name), if any."""
    best: Optional[tuple[float, RootFS]] = None
    try:
        entries = list(cache_dir().iterdir())
    except OSError:
        return None
    for entry in entries:
        if entry.name.startswith("."):
            continue
        found = _load(entry)
        if found is not None and found.image == image:
            when = (entry / META).stat().st_mtime
            if best is None or when > best[0]:
                best = (when, found)
    return best[1] if best else None


def for_image(image: str, image_id: str, export: Callable[[Path], dict],
              on_status: Callable[[str], None]) -> RootFS:
    """The cache entry of image `image_id`, exported once with export(tree folder) -> image.json."""
    return _make_entry(image_id.split(":")[-1][:16], export, on_status, image)


def remove_tree(path: Path) -> None:
    """Remove a folder whatever its modes: an overlay's work/work is mode 000, a sandbox may have
    chmod'ed its folders, an unpacked tree has read-only ones. Links are never followed (nor chmod'ed
    through)."""
    def fix(_func, p, _exc) -> None:
        try:
            os.chmod(os.path.dirname(p), 0o700)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
                _rmtree(p, fix)
            else:
                os.unlink(p)
        except OSError:
            pass

    if os.path.lexists(path):
        _rmtree(path, fix)


def _rmtree(path, fix) -> None:
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=fix)
    else:
        shutil.rmtree(path, onerror=fix)
