"""What the sandbox service (service.py) and its clients (client.py) share: where a service listens and
how its token is found, what a sandbox's configuration is for matching, and the wire form of results.

A service listens on a unix socket (default `$XDG_RUNTIME_DIR/insandbox-pool.sock`, else
`~/.cache/insandbox/pool.sock`; mode 0600, so only its user reaches it) or on a loopback TCP port. A
TCP service makes a random token and writes it to `~/.cache/insandbox/pool/127.0.0.1-PORT.token`
(0600); clients of that URL read it there, so no flag carries it. URLs: `unix:///path/to.sock`,
`http://127.0.0.1:PORT`.
"""
from __future__ import annotations

import base64
import dataclasses
import os
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlparse

from ..base import CommandResult, ExecResult, FileStat, SandboxLimits, SandboxSpec

ENV_URL = "INSANDBOX_POOL_URL"
API = "/v1"
# a lease not renewed for this long is a client that died: its sandbox is removed (the variable: for tests)
LEASE_TTL_S = float(os.environ.get("INSANDBOX_POOL_LEASE_TTL", "60"))
RENEW_EVERY_S = min(10.0, LEASE_TTL_S / 4)


def cache_dir() -> Path:
    return Path(os.environ.get("INSANDBOX_CACHE_DIR", Path.home() / ".cache" / "insandbox"))


def default_socket() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime) / "insandbox-pool.sock" if runtime and Path(runtime).is_dir() else cache_dir() / "pool.sock"


def token_file(host: str, port: int) -> Path:
    return cache_dir() / "pool" / f"{host}-{port}.token"


def parse_url(url: str) -> tuple[Optional[Path], Optional[str], Optional[int]]:
    """(socket path, or None; host, port for TCP)."""
    u = urlparse(url)
    if u.scheme == "unix":
        return Path(u.path), None, None
    if u.scheme == "http" and u.hostname and u.port:
        return None, u.hostname, u.port
    raise ValueError(f"--pool-url {url!r}: unix:///path/to.sock or http://127.0.0.1:PORT")


def token_for(url: str) -> Optional[str]:
    """The token a TCP service wrote for this URL (None for a unix socket, or none written)."""
    sock, host, port = parse_url(url)
    if sock is not None:
        return None
    try:
        return token_file(host, port).read_text().strip() or None
    except OSError:
        return None


# ---------------------------------------------------------------------- matching
def config_of(spec: SandboxSpec, backend: str) -> dict[str, Any]:
    """What two sandboxes must share to be interchangeable: backend, image, limits, network, env."""
    lim = spec.limits
    return {"backend": backend, "image": spec.image, "memory": lim.memory_bytes, "cpus": lim.cpus, "pids": lim.pids,
            "network": lim.network, "disk": lim.disk_bytes, "runtime": lim.runtime, "cap_add": sorted(lim.cap_add),
            "allow_hosts": sorted(lim.allow_hosts), "env": dict(sorted((spec.env or {}).items())),
            "workdir": spec.workdir}


def difference(service: dict, client: dict) -> Optional[str]:
    """The first setting in which the service's sandboxes differ from what the client asks, in words."""
    for key in service:
        if service.get(key) != client.get(key):
            return f"{key}: the service's is {service.get(key)!r}, this command's is {client.get(key)!r}"
    return None


def spec_of(config: dict[str, Any], run_id: str = "pool") -> SandboxSpec:
    """The SandboxSpec of a configuration (the service's sandboxes)."""
    memory = config.get("memory")
    disk = config.get("disk")
    limits = SandboxLimits(memory=None if memory is None else str(memory), cpus=config.get("cpus"),
                           pids=config.get("pids"), network=config["network"],
                           disk=None if disk is None else str(disk), runtime=config.get("runtime"),
                           cap_add=tuple(config.get("cap_add") or ()),
                           allow_hosts=tuple(config.get("allow_hosts") or ()))
    return SandboxSpec(image=config["image"], workdir=config["workdir"], limits=limits,
                       env=dict(config.get("env") or {}), run_id=run_id)


# ---------------------------------------------------------------------- results on the wire
def encode(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"__bytes__": base64.b64encode(value).decode()}
    if isinstance(value, (CommandResult, ExecResult, FileStat)):
        return {"__" + type(value).__name__ + "__": dataclasses.asdict(value)}
    if isinstance(value, tuple):
        return [encode(v) for v in value]
    return value


def decode(value: Any) -> Any:
    if isinstance(value, dict) and len(value) == 1:
        (key, inner), = value.items()
        if key == "__bytes__":
            return base64.b64decode(inner)
        for cls in (CommandResult, ExecResult, FileStat):
            if key == "__" + cls.__name__ + "__":
                return cls(**inner)
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value
