"""Build the sandbox image from the Dockerfile shipped in this package.

The Dockerfile starts FROM a base we provide: `debian:bookworm-slim` when a registry
answers, otherwise a Debian rootfs made on this host with debootstrap and imported
into the engine (machines without registry access, like our CI). The host's extra CA
certificates (/usr/local/share/ca-certificates) go into the image too, so `pip
install` works inside on networks that intercept TLS.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ...core import defaults
from ..base import SandboxError, SetupError
from . import engine


class ImageNotFound(SetupError):
    def __init__(self, image: str):
        super().__init__(f"image {image!r} not found; build it with `insandbox image build --image {image}` "
                         "(or pull it into the engine)")
        self.image = image


DEFAULT_TAG = defaults.IMAGE
BASE_TAG = "insandbox-base:bookworm"
REGISTRY_BASE = "debian:bookworm-slim"
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
DOCKERFILE = Path(__file__).parent / "image" / "Dockerfile"

Progress = Callable[[str], None]


@dataclass
class ImageInfo:
    tag: str
    id: str
    size_bytes: int
    base: str


def image_exists(tag: str) -> bool:
    import docker.errors

    try:
        engine.api().inspect_image(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def image_info(tag: str, base: str = "") -> ImageInfo:
    info = engine.api().inspect_image(tag)
    return ImageInfo(tag=tag, id=info["Id"], size_bytes=int(info.get("Size", 0)), base=base)


def ensure_base(progress: Progress, mirror: Optional[str] = None) -> str:
    """Return the tag of a Debian bookworm base image, making it if needed."""
    if image_exists(BASE_TAG):
        return BASE_TAG
    api = engine.api()
    progress(f"pulling {REGISTRY_BASE}")
    try:
        repo, tag = REGISTRY_BASE.split(":")
        api.pull(repo, tag=tag)
        api.tag(REGISTRY_BASE, *BASE_TAG.split(":"))
        return BASE_TAG
    except Exception as e:
        progress(f"no registry ({str(e).splitlines()[0][:120]}); bootstrapping Debian with debootstrap")
    debootstrap_base(progress, mirror or os.environ.get("INSANDBOX_DEBIAN_MIRROR", "http://deb.debian.org/debian"))
    return BASE_TAG


def _ensure_debootstrap(progress: Progress) -> str:
    found = shutil.which("debootstrap") or (os.path.exists("/usr/sbin/debootstrap") and "/usr/sbin/debootstrap")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        progress("installing debootstrap (apt-get)")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for cmd in (["apt-get", "update", "-qq"],
                    ["apt-get", "install", "-y", "-qq", "debootstrap", "debian-archive-keyring"]):
            r = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if r.returncode != 0:
                raise SandboxError(f"{' '.join(cmd)} failed: {r.stderr.strip()[-500:]}")
        return shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    raise SandboxError("no container registry is reachable and debootstrap is not installed: "
                       "install it (apt-get install debootstrap) or make debian:bookworm-slim available")


def debootstrap_base(progress: Progress, mirror: str) -> None:
    if os.geteuid() != 0:
        raise SandboxError("building the base image with debootstrap needs root; run "
                           "`sudo insandbox image build` once, or load debian:bookworm-slim into the engine")
    tool = _ensure_debootstrap(progress)
    rootfs = Path(tempfile.mkdtemp(prefix="insandbox-rootfs-"))
    rootfs.chmod(0o755)  # it becomes the image's `/`; mkdtemp's 0700 would lock every other user out
    try:
        proc = subprocess.Popen([tool, "--variant=minbase", "bookworm", str(rootfs), mirror],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        tail = []
        for line in proc.stdout:
            tail = (tail + [line.rstrip()])[-20:]
            if line.startswith("I: "):
                progress("debootstrap: " + line[3:].strip())
        if proc.wait() != 0:
            raise SandboxError("debootstrap failed:\n" + "\n".join(tail))
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for f in (rootfs / junk).glob("*"):
                if f.is_file():
                    f.unlink()
        progress(f"importing the rootfs as {BASE_TAG}")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        repo, tag = BASE_TAG.split(":")
        engine.api().import_image(src=tar.stdout, repository=repo, tag=tag, stream_src=True,
                                  changes=['CMD ["/bin/bash"]'])
        if tar.wait() != 0:
            raise SandboxError("tar of the debootstrap rootfs failed")
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)


def _context(ca_files: Iterable[Path]) -> Path:
    ctx = Path(tempfile.mkdtemp(prefix="insandbox-build-"))
    shutil.copy(DOCKERFILE, ctx / "Dockerfile")
    shutil.copy(DOCKERFILE.parent / "statx_compat.c", ctx / "statx_compat.c")
    (ctx / "ca").mkdir()
    for ca in ca_files:
        shutil.copy(ca, ctx / "ca" / (ca.stem + ".crt"))
    return ctx


def host_ca_files() -> list[Path]:
    return sorted(HOST_CA_DIR.rglob("*.crt")) if HOST_CA_DIR.is_dir() else []


def build_image(tag: str = DEFAULT_TAG, base: Optional[str] = None, no_cache: bool = False,
                extra_ca: Iterable[Path] = (), progress: Progress = lambda line: None) -> ImageInfo:
    base = base or ensure_base(progress)
    ctx = _context([*host_ca_files(), *map(Path, extra_ca)])
    try:
        progress(f"building {tag} on {base}")
        build_context(ctx, tag, base, no_cache, progress)
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    return image_info(tag, base)


def build_context(ctx: Path, tag: str, base: str, no_cache: bool = False,
                  progress: Progress = lambda line: None) -> None:
    """Build the Dockerfile in folder `ctx` as `tag`, FROM `base` (its BASE build argument)."""
    step = ""
    log: list[str] = []
    for chunk in engine.api().build(path=str(ctx), tag=tag, buildargs={"BASE": base}, rm=True, forcerm=True,
                                    nocache=no_cache, decode=True, pull=False):
        if "error" in chunk:
            raise SandboxError(f"image build failed at {step!r}: {chunk['error'].strip()}\n" + "\n".join(log[-15:]))
        for line in (chunk.get("stream") or "").splitlines():
            if line.strip():
                log.append(line)
                if line.startswith("Step "):
                    step = line
                progress(line.strip())


def ensure_image(tag: str, progress: Progress = lambda line: None) -> Optional[ImageInfo]:
    """Build the image if it is missing; returns its info when it was built."""
    if image_exists(tag):
        return None
    return build_image(tag, progress=progress)
