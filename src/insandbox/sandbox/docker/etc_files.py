"""/etc/hosts, /etc/resolv.conf and /etc/hostname of a Docker sandbox: ours, mounted read-only
(and, on Podman, /run/.containerenv).

The engine would otherwise keep these three files on the host (in its own folder, outside the
container's disk limit) and mount them writable: a sandbox could append gigabytes to /etc/hosts, or
change their mode, owner and extended attributes for the next sample that reuses the container.
Mounting a file of our own at one of those paths makes the engine leave the path alone, so each
sandbox gets a folder of its own on the host with three small files written here, mounted read-only
(the sandbox cannot write, chmod or setfattr them: the mount refuses). The host side may still
rewrite a file in place (the sandbox's address in /etc/hosts, known once it started).

What they hold, by network mode, is the same for every backend: ../netfiles.py.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from .. import netfiles
from ..netfiles import (  # noqa: F401 (re-exported: what the files hold is the same for every backend)
    ENGINE_RESOLVER,
    FALLBACK_NAMESERVERS,
    HOSTNAME,
    LOOPBACK_HOSTS,
    _read,
    contents,
    host_resolv_conf,
    search_and_options,
)
from . import engine

FILES = {**netfiles.FILES, "containerenv": "/run/.containerenv"}  # the last on Podman only (podman_files)


def root() -> Path:
    """Where the sandboxes' folders live on this host: /run (memory, emptied at boot) for root, else the
    temporary folder, one per user."""
    if os.environ.get("INSANDBOX_ETC_DIR"):
        return Path(os.environ["INSANDBOX_ETC_DIR"])
    if os.geteuid() == 0 and os.path.isdir("/run"):
        return Path("/run/insandbox/sandboxes")
    return Path(tempfile.gettempdir()) / f"insandbox-{os.getuid()}-etc"


def podman_files() -> dict[str, str]:
    """Podman also mounts a file of its own writable into every container (/run/.containerenv, on the
    host's /run: memory, outside the disk limit, and kept across a recycle): ours instead, empty and
    read-only, as Podman's is for a container that is not privileged."""
    return {"containerenv": ""}


OWNER_FILE = ".owner"  # the creating process (docker.owner_label), for `insandbox clean`
ENGINE_FILE = ".engine"  # the engine (DOCKER_HOST) of its container: one host may run several (Docker, Podman)


def create(name: str, files: dict[str, str], owner: str) -> dict[str, dict]:
    """Write a sandbox's files in a folder of its own; returns the engine's read-only binds."""
    folder = root() / name
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder.parent, 0o755)
    (folder / OWNER_FILE).write_text(owner)
    (folder / ENGINE_FILE).write_text(engine.docker_host())
    binds = {}
    for file, text in files.items():
        path = folder / file
        path.write_text(text)
        os.chmod(path, 0o644)
        binds[str(path)] = {"bind": FILES[file], "mode": "ro"}
    return binds


def rewrite(name: str, file: str, text: str) -> None:
    """Change a file in place (the same inode: the sandbox sees it through its mount)."""
    with open(root() / name / file, "r+") as f:
        f.write(text)
        f.truncate()


def remove(name: str) -> None:
    shutil.rmtree(root() / name, ignore_errors=True)


def folders() -> list[tuple[Path, str]]:
    """(folder, owner) of every sandbox's files on this host whose container is on this process's engine
    (a folder of another engine's sandbox is not ours to judge: its container is not in our list)."""
    try:
        found = [p for p in root().iterdir() if p.is_dir()]
    except OSError:
        return []
    here = engine.docker_host()
    return [(p, _read(str(p / OWNER_FILE)).strip()) for p in found
            if (_read(str(p / ENGINE_FILE)).strip() or here) == here]
