"""A Harbor task's image: the named one, or its `environment/` built once per content.

The tag is `insandbox-harbor:<sha256 of the folder's files, paths and modes>`, so an unchanged task is
never built twice and a changed one always is; an image is kept (like the sandbox image) until the
user removes it. The working folder is the task's `environment.workdir`, else the image's WORKDIR.
insandbox's sandbox server runs on the image's own `python3`: an image without one is refused in one
line. The backend builds and looks (Sandbox.build_image, Sandbox.image_config).
"""
from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from ...core.errors import ConfigError
from ...sandbox import backend_class
from .task import HarborTask

REPOSITORY = "insandbox-harbor"
MAX_CONTEXT_BYTES = 2 << 30  # a build context bigger than this is a mistake (a dataset folder in environment/)


def content_tag(folder: Path) -> str:
    """The image tag for the build context `folder`: a digest of every file's path, mode and bytes."""
    digest = hashlib.sha256()
    total = 0
    for path in sorted(p for p in folder.rglob("*") if not p.is_dir()):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            digest.update(f"L {rel} {os.readlink(path)}\n".encode())
            continue
        st = path.stat()
        total += st.st_size
        if total > MAX_CONTEXT_BYTES:
            raise ConfigError(f"{folder}: the build context is over {MAX_CONTEXT_BYTES >> 30} GiB")
        digest.update(f"F {rel} {st.st_mode & 0o777:o} {st.st_size}\n".encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return f"{REPOSITORY}:{digest.hexdigest()[:20]}"


async def prepare(task: HarborTask, backend: str, on_status: Callable[[str], None] = lambda text: None
                  ) -> tuple[str, str]:
    """(image, working folder) of the task's sandboxes: the image built here when it is the task's own."""
    cls = backend_class(backend)
    if not cls.capabilities.build_images:
        raise ConfigError(f"Harbor tasks need a backend that runs a task's own image (docker); not {backend}")
    env = task.environment
    if env.dockerfile_dir is None:
        tag = env.image
        config = await cls.image_config(tag)
        if config is None:
            raise ConfigError(f"task {task.name}: image {tag} is not on this machine (`docker pull` or `docker load` "
                              "it first; no registry is asked)")
    else:
        tag = await asyncio.to_thread(content_tag, env.dockerfile_dir)
        config = await cls.image_config(tag)
        if config is None:
            on_status(f"task {task.name}: building its environment as {tag}")
            await cls.build_image(env.dockerfile_dir, tag, env.build_timeout_s)
            config = await cls.image_config(tag)
    if not config or not config.get("python3"):
        raise ConfigError(f"task {task.name}: image {tag} has no working python3; insandbox's sandbox server runs on "
                          "it: add python3 to the task's image")
    return tag, env.workdir or config["workdir"]
