"""Images of a user's own (a Harbor task's environment/): built from their Dockerfile and looked at.

The build asks no registry (`pull=False`: a FROM names an image this engine has). Looking at an image
includes whether insandbox's server can run on it: a container of the image runs `python3 -c pass`
(labelled, so `insandbox clean` finds one a killed process left)."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Optional

from ..base import SandboxError
from . import engine
from .labels import LABEL, LABEL_OWNER, owner_label


def image_config(image: str) -> Optional[dict]:
    import docker.errors

    api = engine.api()
    try:
        info = api.inspect_image(image)
    except docker.errors.ImageNotFound:
        return None
    workdir = ((info.get("Config") or {}).get("WorkingDir") or "/").rstrip("/") or "/"
    return {"workdir": workdir, "python3": _runs_python(api, image)}


def _runs_python(api, image: str) -> bool:
    cid = api.create_container(image, command=["python3", "-c", "pass"], entrypoint=[], network_disabled=True,
                               labels={LABEL: "1", LABEL_OWNER: owner_label()})["Id"]
    try:
        api.start(cid)
        return int(api.wait(cid, timeout=60).get("StatusCode", 1)) == 0
    except Exception:
        return False
    finally:
        api.remove_container(cid, force=True)


def build_image(folder: Path, tag: str, timeout_s: float) -> None:
    """Build `folder`'s Dockerfile as `tag`; SandboxError with the last lines on failure or past the timeout."""
    api = engine.api()
    log: list[str] = []
    done = threading.Event()
    timer = threading.Timer(timeout_s, done.set)
    timer.start()
    try:
        for chunk in api.build(path=str(folder), tag=tag, rm=True, forcerm=True, decode=True, pull=False):
            if "error" in chunk:
                tail = "\n".join(log[-10:])
                raise SandboxError(f"building {folder}/Dockerfile failed: {chunk['error'].strip()}\n{tail}")
            log += [line for line in (chunk.get("stream") or "").splitlines() if line.strip()]
            if done.is_set():
                raise SandboxError(f"building {folder}/Dockerfile ran past {timeout_s:g} s")
    finally:
        timer.cancel()
