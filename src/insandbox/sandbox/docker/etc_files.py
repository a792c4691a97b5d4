"""/etc/hosts, /etc/resolv.conf and /etc/hostname of a Docker sandbox: ours, mounted read-only
(and, on Podman, /run/.containerenv).

The engine would otherwise keep these three files on the host (in its own folder, outside the
container's disk limit) and mount them writable: a sandbox could append gigabytes to /etc/hosts, or
change their mode, owner and extended attributes for the next sample that reuses the container.
Mounting a file of our own at one of those paths makes the engine leave the path alone, so each
sandbox gets a folder of its own on the host with three small files written here, mounted read-only
(the sandbox cannot write, chmod or setfattr them: the mount refuses). The host side may still
rewrite a file in place (the sandbox's address in /etc/hosts, known once it started).

What they hold mirrors what the engine would write: the loopback names and the sandbox's own name;
for `bridge`, the host's name servers without the loopback ones (which a container cannot reach),
or Google's public ones when none is left; for a network the user names, the engine's own resolver
(127.0.0.11); for `registries` no name server (the proxy resolves names) and the proxy's address
under its name; for `host`, the host's own files.
"""
from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Optional

from . import engine

HOSTNAME = "sandbox"
FILES = {"hosts": "/etc/hosts", "resolv.conf": "/etc/resolv.conf", "hostname": "/etc/hostname",
         "containerenv": "/run/.containerenv"}  # the last on Podman only (podman_files)
FALLBACK_NAMESERVERS = ("8.8.8.8", "8.8.4.4")  # the engine's own fallback
ENGINE_RESOLVER = "127.0.0.11"
LOOPBACK_HOSTS = ("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n"
                  "ff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n")


def root() -> Path:
    """Where the sandboxes' folders live on this host: /run (memory, emptied at boot) for root, else the
    temporary folder, one per user."""
    if os.environ.get("INSANDBOX_ETC_DIR"):
        return Path(os.environ["INSANDBOX_ETC_DIR"])
    if os.geteuid() == 0 and os.path.isdir("/run"):
        return Path("/run/insandbox/sandboxes")
    return Path(tempfile.gettempdir()) / f"insandbox-{os.getuid()}-etc"


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def host_resolv_conf() -> str:
    """The host's resolver settings as a container on a bridge can use them (the engine's rules)."""
    text = _read("/etc/resolv.conf")
    servers = [line.split()[1] for line in text.splitlines() if line.split()[:1] == ["nameserver"]
               and len(line.split()) > 1]
    if servers and all(_is_loopback(s) for s in servers) and Path("/run/systemd/resolve/resolv.conf").is_file():
        text = _read("/run/systemd/resolve/resolv.conf")  # systemd-resolved's stub: its upstream servers
    kept, has_server = [], False
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["nameserver"]:
            if len(words) < 2 or _is_loopback(words[1]):
                continue
            has_server = True
        kept.append(line)
    if not has_server:
        kept += [f"nameserver {s}" for s in FALLBACK_NAMESERVERS]
    return "\n".join(kept) + "\n"


def search_and_options() -> list[str]:
    return [line for line in _read("/etc/resolv.conf").splitlines() if line.split()[:1] in (["search"], ["options"])]


def contents(network: str, builtin: bool, proxy: Optional[tuple[str, str]] = None,
             address: Optional[str] = None) -> dict[str, str]:
    """The three files for a network mode. builtin: bridge/none/host/registries (else a network the
    user named); proxy: (address, name) of the registries proxy; address: the sandbox's own."""
    own = f"{address or '127.0.1.1'}\t{HOSTNAME}\n"
    if network == "host":
        return {"hosts": _read("/etc/hosts") or LOOPBACK_HOSTS, "resolv.conf": _read("/etc/resolv.conf"),
                "hostname": socket.gethostname() + "\n"}
    hosts = LOOPBACK_HOSTS + own
    if network == "registries":
        if proxy:
            hosts += f"{proxy[0]}\t{proxy[1]}\n"
        resolv = "# no name server: the registries proxy resolves names\n"
    elif network == "none":
        resolv = "# no network\n"
    elif builtin:
        resolv = host_resolv_conf()
    else:  # a user-defined network: the engine's resolver, which forwards to the host's
        resolv = "\n".join([f"nameserver {ENGINE_RESOLVER}", *search_and_options(), "options ndots:0"]) + "\n"
    return {"hosts": hosts, "resolv.conf": resolv, "hostname": HOSTNAME + "\n"}


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
