"""The connection to the Docker engine, shared by every sandbox of the process.

The Docker SDK is synchronous; its calls run on a dedicated thread pool (asyncio's
default pool has only cpu+4 threads, which would serialise a benchmark's container
starts). The hot path, commands in the shell, does not use it: it goes over the
attach stream (see channel.py).
"""
from __future__ import annotations

import asyncio
import functools
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, TypeVar

from ..base import SandboxError

T = TypeVar("T")

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
POOL_SIZE = 64

_lock = threading.Lock()
_api = None
_pool: Optional[ThreadPoolExecutor] = None


def docker_host() -> str:
    return os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET


def is_local() -> bool:
    """The engine runs on this machine (reached through a unix socket here)."""
    from urllib.parse import urlparse

    url = urlparse(docker_host())
    return url.scheme in ("unix", "") and os.path.exists(url.path or docker_host())


def api():
    """The process-wide low-level Docker client (docker.APIClient)."""
    global _api
    with _lock:
        if _api is None:
            import docker

            try:
                client = docker.APIClient(base_url=docker_host(), version="auto", max_pool_size=POOL_SIZE,
                                          timeout=600)
            except Exception as e:  # DockerException: engine down, socket missing, no permission
                raise SandboxError(
                    f"cannot reach the Docker engine at {docker_host()}: {e}. Is dockerd running "
                    "(`dockerd &`, or `bash scripts/setup.sh` in a checkout)?") from e
            _api = client
        return _api


_podman: dict[str, str] = {}  # docker host -> Podman's API version ("": the engine is not Podman)
_podman_host: dict[str, dict] = {}  # docker host -> what Podman says of its host (libpod's info)


def podman_version() -> str:
    """Podman's version when the engine is Podman (`podman system service`) speaking Docker's API, else
    "". Same calls, a few differences: its storage driver is called `overlay`, its `rm -f` races a
    container that is stopping, it reads a running container's files inside its mount namespace."""
    host = docker_host()
    if host not in _podman:
        found = [c for c in api().version().get("Components") or [] if "podman" in str(c.get("Name", "")).lower()]
        _podman[host] = str((found[0].get("Details") or {}).get("APIVersion") or found[0].get("Version") or "4") \
            if found else ""
    return _podman[host]


def is_podman() -> bool:
    return bool(podman_version())


def podman_host() -> dict:
    """Podman's own account of its host (rootless or not, cgroup version and controllers), from its
    libpod API: Docker's /info, as Podman answers it, claims every limit is supported."""
    host = docker_host()
    if host not in _podman_host:
        client = api()
        resp = client.get(f"{client.base_url}/v{podman_version()}/libpod/info")
        resp.raise_for_status()
        _podman_host[host] = resp.json().get("host") or {}
    return _podman_host[host]


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=POOL_SIZE, thread_name_prefix="insandbox-docker")
        return _pool


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking SDK call on the docker thread pool. The engine being unreachable is a
    SandboxError; the engine's own answers (docker.errors.APIError) reach the caller as they are."""
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(_executor(), functools.partial(fn, *args, **kwargs))
    except Exception as e:
        if is_unreachable(e):
            raise SandboxError(f"the Docker engine at {docker_host()} stopped answering: {e}") from e
        raise


def remove_container(api, container: str) -> None:
    """`rm -f` a container (its anonymous volumes too). Podman 4 refuses it while the container is
    stopping by itself ("could not be stopped ... container state improper"), which is what every
    sandbox does when its channel closes: once it has stopped, the second try goes through."""
    import docker.errors

    for attempt in range(20):
        try:
            api.remove_container(container, force=True, v=True)
            return
        except docker.errors.APIError as e:
            if attempt == 19 or "state improper" not in str(e.explanation or e):
                raise
            time.sleep(0.05)


def is_unreachable(exc: BaseException) -> bool:
    """A failure to talk to the engine at all (socket gone, connection refused or dropped)."""
    import docker.errors
    import requests.exceptions

    if isinstance(exc, docker.errors.APIError):
        return False
    return isinstance(exc, (requests.exceptions.ConnectionError, docker.errors.DockerException, ConnectionError))


def is_not_found(exc: BaseException) -> bool:
    import docker.errors

    return isinstance(exc, docker.errors.NotFound)
