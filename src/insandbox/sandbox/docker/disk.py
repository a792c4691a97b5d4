"""A sandbox's disk limit on engines whose storage cannot enforce `--storage-opt size=`.

overlay2 caps a container's disk only on XFS with project quotas, and many kernels (this
project's machines included) have no quota support at all. btrfs qgroups work there, but made
removing a container 100x slower (2-7 s instead of 40 ms), which a benchmark or an RL run
starting thousands of sandboxes cannot pay.

So the cap is a filesystem of its own: between creating the container and starting it, a sparse
file of the allowed size gets an ext4 filesystem (no journal: it lives as long as the sandbox),
which is loop-mounted on the container's overlay2 layer folder (its `diff` and `work` folders
then live in it). The kernel refuses writes past it with ENOSPC, inside the sandbox; `df /`
there shows the limit. The file is unlinked once mounted, so its space is freed when the mount
goes, and the engine unmounts it when it removes the container: nothing is left behind, even
when this process is killed.

Needs what it touches: root, an engine on this machine (a unix socket), overlay2, `mkfs.ext4`
and loop devices.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

MKFS = ("mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m", "0", "-E", "lazy_itable_init=1,root_owner=0:0")


def unavailable(info: dict) -> Optional[str]:
    """Why this engine's containers cannot get a filesystem of their own (None: they can)."""
    from . import engine

    if info.get("Driver") != "overlay2":
        if engine.is_podman():  # its `overlay` has overlay2's layout, but not a stable place to mount on
            return ("the engine is Podman, whose storage mounts its overlay folder over itself and back, which can "
                    "hide a sandbox's own filesystem mounted inside it")
        return f"the engine's storage driver is {info.get('Driver')!r}, not overlay2"
    if not engine.docker_host().startswith("unix://"):
        return "the engine is not on this machine"
    if os.geteuid() != 0:
        return "this process is not root (mounting needs it)"
    if not Path(info.get("DockerRootDir") or "/nonexistent", "overlay2").is_dir():
        return "the engine's storage folder is not visible here"
    if shutil.which("mkfs.ext4") is None:
        return "mkfs.ext4 is not installed (Debian: e2fsprogs)"
    if not os.path.exists("/dev/loop-control"):
        return "this machine has no loop devices"
    return None


def attach(upper_dir: str, size_bytes: int) -> None:
    """Give a created (not yet started) container's overlay2 layer a filesystem of size_bytes."""
    layer = Path(upper_dir).parent
    if not layer.is_dir() or Path(upper_dir).name != "diff":
        raise OSError(f"{upper_dir}: not an overlay2 layer folder")
    fd, image = tempfile.mkstemp(prefix=".insandbox-disk-", suffix=".img", dir=layer.parent)
    try:
        os.ftruncate(fd, size_bytes)
        os.close(fd)
        fd = -1
        _run([*MKFS, image])
        st = layer.stat()
        saved = tempfile.mkdtemp(prefix=".insandbox-layer-", dir=layer.parent)
        try:
            for entry in layer.iterdir():  # `link`, `lower`, empty `diff` and `work`: a few bytes
                shutil.move(str(entry), saved)
            _run(["mount", "-o", "loop", image, str(layer)])
            for entry in Path(saved).iterdir():
                shutil.move(str(entry), str(layer))
            shutil.rmtree(layer / "lost+found", ignore_errors=True)
            os.chown(layer, st.st_uid, st.st_gid)  # as the engine made it (user-namespaced engines differ)
            os.chmod(layer, st.st_mode & 0o7777)
        finally:
            for entry in Path(saved).iterdir():  # the mount failed: put the layer back as it was
                shutil.move(str(entry), str(layer))
            os.rmdir(saved)
    finally:
        if fd >= 0:
            os.close(fd)
        os.unlink(image)  # mounted, it lives until the unmount; otherwise it is simply gone


def _run(argv: list[str]) -> None:
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    if p.returncode != 0:
        raise OSError(f"{' '.join(argv[:1])} failed: {p.stdout.decode(errors='replace').strip()[-300:]}")
