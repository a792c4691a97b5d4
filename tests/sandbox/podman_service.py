"""Podman's Docker API service (`podman system service`) for the tests: started on a socket of its own,
as root or as a user, with the sandbox image copied from the Docker engine into its store (once per
image: `docker save | podman load`), and the Docker backend pointed at it through DOCKER_HOST for a
while (engine_at). test_podman.py and the conformance suite (conformance/) start theirs from here."""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import pytest

from insandbox.sandbox.docker import LABEL, engine, proxy

IMAGE = "insandbox:latest"
MISSING = "podman is not installed: `bash scripts/setup.sh` installs it (Debian's podman package)"


class Service:
    """`podman system service` on a socket of its own, as root or as `user`."""

    def __init__(self, folder: Path, user: Optional[str] = None, env: Optional[dict] = None):
        self.folder, self.user, self.env = folder, user, dict(env or {})
        self.socket = folder / "podman.sock"
        self.host = f"unix://{self.socket}"
        self.log = folder / "service.log"
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        argv = ["podman", "system", "service", "--time=0", self.host]
        if self.user:
            argv = ["runuser", "-u", self.user, "--", "env", *(f"{k}={v}" for k, v in self.env.items()), *argv]
        with open(self.log, "ab") as log:
            # in its own folder: conmon writes an `oom` file where it runs when a container is killed for memory
            self.proc = subprocess.Popen(argv, env={**os.environ, **self.env}, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, cwd=self.folder)
        import docker

        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"podman system service exited ({self.proc.returncode}): {self.log.read_text()[-2000:]}")
            try:
                if self.socket.exists() and docker.APIClient(base_url=self.host, version="1.41", timeout=5).ping():
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"podman system service did not answer on {self.socket}: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def api(self):
        import docker

        return docker.APIClient(base_url=self.host, version="auto", timeout=600)


def hard_limit(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith(name):
            return int(line[len(name):].split()[1])
    raise AssertionError(f"no {name} in /proc/{pid}/limits")


def load_image(service: Service, user: Optional[str], tag: str = IMAGE) -> None:
    """An image of the Docker engine into this Podman's store, unless it has it already; the copy it
    replaces is removed (the sandbox image is 1.3 GB)."""
    docker_env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    found = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", tag], env=docker_env,
                           capture_output=True, text=True)
    assert found.returncode == 0, f"{tag} is not in the Docker engine (scripts/setup.sh builds it): {found.stderr}"
    want = found.stdout.strip()
    api = service.api()
    try:
        have = api.inspect_image(tag)["Id"]
    except Exception:
        have = None
    if have == want:
        return
    load = ["podman", "load"]
    if user:
        load = ["runuser", "-u", user, "--", "env", *(f"{k}={v}" for k, v in service.env.items()), *load]
    save = subprocess.Popen(["docker", "save", tag], env=docker_env, stdout=subprocess.PIPE)
    loaded = subprocess.run(load, stdin=save.stdout, capture_output=True, text=True, env={**os.environ, **service.env})
    save.stdout.close()
    assert save.wait() == 0 and loaded.returncode == 0, loaded.stderr[-2000:]
    if have:
        with contextlib.suppress(Exception):
            api.remove_image(have)


def clean_up(service: Service) -> None:
    """What the tests made in this Podman: sandboxes, the registries proxy and its networks. Podman lists
    nothing while one container's network namespace is no longer mounted (another Podman service of
    this machine mounted /run/netns again over it): that container is removed by its id, then again."""
    api = service.api()
    for _ in range(50):
        try:
            found = [c["Id"] for label in (f"{LABEL}=1", proxy.LABEL_PROXY)
                     for c in api.containers(all=True, filters={"label": label})]
        except Exception as e:
            stale = re.search(r"network namespace of container ([0-9a-f]{64})", str(e))
            if stale is None:
                raise
            subprocess.run(["podman", "rm", "-f", stale.group(1)], env={**os.environ, **service.env},
                           capture_output=True)
            continue
        for cid in found:
            with contextlib.suppress(Exception):
                engine.remove_container(api, cid)
        break
    for n in api.networks(filters={"label": proxy.LABEL_PROXY}):
        with contextlib.suppress(Exception):
            api.remove_network(n["Id"])


def shut_down(service: Service) -> None:
    """What the tests made removed, then the service stopped and its folder gone (also when Podman fails to
    list its containers)."""
    try:
        clean_up(service)
    finally:
        service.stop()
        shutil.rmtree(service.folder, ignore_errors=True)


def need_podman() -> None:
    if shutil.which("podman") is None:
        pytest.fail(MISSING)
    if os.geteuid() != 0:
        pytest.fail("the Podman tests start services as root and as a user of their own: run them as root")


@contextlib.contextmanager
def rootful_service() -> Iterator[Service]:
    """Rootful Podman's service with the sandbox image and the registries proxy's, stopped at the end."""
    need_podman()
    folder = Path(tempfile.mkdtemp(prefix="insandbox-podman-", dir="/run"))
    conf = folder / "containers.conf"
    conf.write_text("")
    service = Service(folder, env={"CONTAINERS_CONF": str(conf)})
    # Rootful Podman gives every container 1048576 open files and processes whatever its own limits;
    # where root may not raise a limit (no CAP_SYS_RESOURCE, as in some VMs) no container starts.
    # Its containers get Podman's own limits instead, as Docker's get dockerd's.
    service.start()
    nofile, nproc = hard_limit(service.proc.pid, "Max open files"), hard_limit(service.proc.pid, "Max processes")
    service.stop()
    conf.write_text(f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n')
    service.start()
    try:
        clean_up(service)  # what an earlier service left in the shared store (a killed run): its namespaces are gone
        load_image(service, None)
        load_image(service, None, proxy.image_tag())  # the registries proxy's
        yield service
    finally:
        shut_down(service)


@contextlib.contextmanager
def engine_at(host: str):
    """This process's sandboxes on the engine at `host` for a while (the client is made again)."""
    saved = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = host
    engine._api = None
    proxy.forget()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = saved
        engine._api = None
        proxy.forget()
