"""Leftover Docker sandboxes, for `insandbox clean` (the Docker backend's `clean`).

Only containers labelled insandbox=1 are considered. A container is left over when the
process that created it (its owner label: host, pid and the process's start time, so a
reused pid is not mistaken for the owner) is gone from this host, whatever the container's
state. A container whose owner is alive is never touched, even if it is still being
created or has stopped: its owner may be starting it or copying its files back.
`everything=True` takes all of them, for when you know no run is in progress.

The registries proxy and its networks (proxy.py) are shared by every process of the host, so
they belong to no owner: they go once idle (no sandbox on their network, none joined in the
last 10 minutes), or with `everything`. Snapshot images (snapshot.py) go like containers: once
their owner is gone and no container uses them.
"""
from __future__ import annotations

from ..base import Leftover
from . import engine, etc_files, proxy
from .labels import LABEL, LABEL_OWNER, LABEL_RUN, owner_gone


def leftover_reason(container: dict, everything: bool) -> str:
    """Why this container may be removed, or "" to keep it."""
    gone = owner_gone((container.get("Labels") or {}).get(LABEL_OWNER, ""))
    if gone:
        return gone
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
                engine.remove_container(engine.api(), item.id)
            except Exception as e:
                if not engine.is_not_found(e):
                    raise
        removed.append(item)
    from .snapshot import clean_images  # after the containers: an image in use is kept

    return (removed + proxy.clean(everything, dry_run, removing={item.id for item in removed})
            + clean_images(everything, dry_run) + clean_etc_folders(everything, dry_run))


def clean_etc_folders(everything: bool, dry_run: bool) -> list[Leftover]:
    """The host folders of sandboxes' /etc files (etc_files.py) whose container is gone and whose
    owner is gone (or any owner, with `everything`)."""
    names = {n.lstrip("/") for c in engine.api().containers(all=True, filters={"label": f"{LABEL}=1"})
             for n in c.get("Names") or []}
    out = []
    for folder, owner in etc_files.folders():
        if folder.name in names:
            continue
        reason = owner_gone(owner) or ("--all" if everything else "")
        if not reason:
            continue
        if not dry_run:
            etc_files.remove(folder.name)
        out.append(Leftover(id=folder.name, name=str(folder), run_id="", status="files", reason=reason))
    return out
