"""An image's root filesystem out of the engine, for the bwrap backend on machines (or users) without
Docker: `docker export` of a container made from the image (never started), unpacked into a folder
(../rootfs.py: root/ and image.json) or written as one tar a node without Docker unpacks.
"""
from __future__ import annotations

import io
import json
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Optional

from .. import rootfs
from ..owner import owner_label
from . import engine
from .labels import LABEL, LABEL_CREATED, LABEL_OWNER, LABEL_RUN


class _ChunkReader(io.RawIOBase):
    """A file over the engine's stream of chunks (tarfile reads it once, front to back)."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks: Iterator[bytes] = iter(chunks)
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        while not self._left:
            try:
                self._left = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(buf), len(self._left))
        buf[:n], self._left = self._left[:n], self._left[n:]
        return n


def _exported(image: str, write: Callable[[io.BufferedReader], None]) -> dict:
    """Hand `write` the tar stream of a container of the image; returns the image's image.json."""
    import docker.errors

    from .image import ImageNotFound

    api = engine.api()
    try:
        info = api.inspect_image(image)
    except docker.errors.ImageNotFound:
        raise ImageNotFound(image) from None
    labels = {LABEL: "1", LABEL_RUN: "export", LABEL_OWNER: owner_label(), LABEL_CREATED: str(int(time.time()))}
    container = api.create_container(image, command=["true"], entrypoint=[], labels=labels)  # clean removes it
    try:
        write(io.BufferedReader(_ChunkReader(api.export(container["Id"])), buffer_size=1 << 20))
    finally:
        api.remove_container(container["Id"], force=True)
    return rootfs.image_meta(image, info["Id"], info.get("Config") or {}, "docker export")


def export_tree(image: str, tree: Path) -> dict:
    """The image's files unpacked into `tree`; returns its image.json."""
    return _exported(image, lambda stream: rootfs.unpack(stream, tree))


def export_image(image: str, out: Path) -> Path:
    """`insandbox image export`: a folder (root/ and image.json) or, for a name ending in .tar, one tar
    with image.json in it. Either is what INSANDBOX_ROOTFS names on a node without Docker."""
    out = Path(out)
    if out.suffix == ".tar":
        partial = out.with_name(out.name + ".partial")

        def write(stream) -> None:
            with open(partial, "wb") as f:
                while chunk := stream.read(1 << 20):
                    f.write(chunk)

        meta = _exported(image, write)
        data = json.dumps(meta, indent=1).encode() + b"\n"
        with tarfile.open(partial, "a") as tar:
            member = tarfile.TarInfo(rootfs.META_MEMBER)
            member.size, member.mode, member.mtime = len(data), 0o644, int(time.time())
            tar.addfile(member, io.BytesIO(data))
        partial.rename(out)
        return out
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty")
    meta = export_tree(image, out / rootfs.TREE)
    (out / rootfs.META).write_text(json.dumps(meta, indent=1) + "\n")
    return out


def image_id(image: str) -> Optional[str]:
    """The image's id in the engine, or None where the image is not there."""
    import docker.errors

    try:
        return engine.api().inspect_image(image)["Id"]
    except docker.errors.ImageNotFound:
        return None
