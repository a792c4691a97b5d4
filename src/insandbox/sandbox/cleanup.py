"""`insandbox clean`: remove sandboxes left behind, and only ours.

Only containers labelled insandbox=1 are considered. Of those, a container is left
over when it is no longer running (its server exits when its owner goes away) or
when its owner process, on this host, is gone. `everything=True` also takes running
sandboxes of live processes, for when you know no run is in progress.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from . import engine
from .docker import LABEL, LABEL_OWNER, LABEL_RUN


@dataclass
class Leftover:
    id: str
    name: str
    run_id: str
    status: str
    reason: str


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def leftover_reason(container: dict, everything: bool) -> str:
    """Why this container may be removed, or "" to keep it."""
    if container.get("State") != "running":
        return "not running"
    owner = (container.get("Labels") or {}).get(LABEL_OWNER, "")
    host, _, pid = owner.rpartition(":")
    if host == socket.gethostname() and pid.isdigit() and not _pid_alive(int(pid)):
        return f"owner process {pid} is gone"
    if everything:
        return "--all"
    return ""


def find_leftovers(everything: bool = False) -> list[Leftover]:
    found = []
    for c in engine.api().containers(all=True, filters={"label": f"{LABEL}=1"}):
        reason = leftover_reason(c, everything)
        if reason:
            labels = c.get("Labels") or {}
            found.append(Leftover(id=c["Id"], name=(c.get("Names") or ["?"])[0].lstrip("/"),
                                  run_id=labels.get(LABEL_RUN, ""), status=c.get("Status", ""), reason=reason))
    return found


def clean(everything: bool = False, dry_run: bool = False) -> list[Leftover]:
    removed = []
    for item in find_leftovers(everything):
        if not dry_run:
            try:
                engine.api().remove_container(item.id, force=True, v=True)
            except Exception as e:
                if not engine.is_not_found(e):
                    raise
        removed.append(item)
    return removed
