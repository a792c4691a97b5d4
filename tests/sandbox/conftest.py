"""Fixtures of the sandbox tests: the image's root filesystem as one tar (exported once per image id
with the Docker engine), from which the bwrap backend's sandboxes and the conformance suite's start
with no engine at all. The tar and the caches it is unpacked into live under
/var/tmp/insandbox-test-rootfs/ (readable by the bwrap tests' unprivileged user); a new image id
replaces them."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOTFS_DIR = Path("/var/tmp/insandbox-test-rootfs")
NO_DOCKER = "unix:///nonexistent/docker.sock"


@pytest.fixture(scope="session")
def rootfs_tar(docker_image) -> Path:
    """insandbox:latest's root filesystem as one tar (insandbox image export's), made once per image id."""
    from insandbox.sandbox import backend_class

    docker = backend_class("docker")
    image_id = docker.image_id(docker_image).split(":")[-1][:16]
    tar = ROOTFS_DIR / f"{image_id}.tar"
    if not tar.is_file():
        if ROOTFS_DIR.exists():  # another image's tar and its unpacked copies: 1.3 GB each
            shutil.rmtree(ROOTFS_DIR)
        ROOTFS_DIR.mkdir(parents=True)
        docker.export_root_filesystem(docker_image, tar)
    os.chmod(ROOTFS_DIR, 0o755)
    os.chmod(tar, 0o644)
    return tar


def cache_of(uid: int) -> Path:
    return ROOTFS_DIR / f"cache-{uid}"
