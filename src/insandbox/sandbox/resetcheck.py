"""The host's own check of a reset, before a used sandbox may serve another sample.

The in-sandbox server's reset (guest/server.py `reset`) kills every process, empties the in-memory
folders and puts its own settings back, and says so. That is a claim made beside the last sample's
code; what decides is what this machine reads itself (hostview.py):

- processes: the sandbox's cgroup lists its first process alone; any other is killed from here, and
  if one remains the sandbox is discarded;
- sockets: its network namespace holds no TCP socket (TIME_WAIT ones outlive their processes and
  tell the next sample what the last one connected to): closed from here, else discarded;
- System V IPC: none left in its IPC namespace (read by a thread of this process that enters it);
- its first process's settings (limits, OOM score, core dump filter, affinity, priority...) as at
  its start;
- /dev and the emptied in-memory folders: every entry's type, mode and owner as at the start, the
  access and modification times put back from here (a sample could leave a message in them), the
  emptied folders empty. Their change times cannot be put back: they show whether an earlier
  sample touched an entry (the isolation table of docs/security/index.md ('Who vouches for each
  guarantee') lists it).

Anything that cannot be read, or differs, is a `ResetRefused`: the caller removes the sandbox.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import InternalSignal
from . import hostview
from .guest.protocol import STATE_DIR

EMPTIED = ("dev/shm", "dev/mqueue", STATE_DIR.lstrip("/"))  # as the server's own list (guest/server.py)
TREES = ("dev", *EMPTIED)
DEV_SKIP = ("pts",)  # pseudo-terminals come and go (and devpts is a file system of its own anyway)


class ResetRefused(InternalSignal):
    """What the host found left of the last sample; the sandbox must not serve another."""


@dataclass
class Baseline:
    """What the host reads right after the sandbox started, to compare each reset with."""

    init: dict
    trees: dict  # folder under the sandbox's root -> hostview.entry_times() of it


@dataclass
class Outcome:
    killed: int = 0  # processes the host killed after the server's reset
    sockets_closed: int = 0  # TCP sockets the host closed


def _root(view: hostview.ProcessView) -> str:
    return f"/proc/{view.init_pid}/root"


def take(view: hostview.ProcessView) -> Baseline:
    """Raises ResetRefused where this machine cannot read what a reset is checked against."""
    init = hostview.init_fingerprint(view.init_pid)
    trees = {f: hostview.entry_times(f"{_root(view)}/{f}", DEV_SKIP if f == "dev" else ()) for f in TREES}
    if init is None or None in trees.values():
        raise ResetRefused("this machine cannot read the sandbox's first process or its in-memory folders")
    if any(len(tree) > 1 for f, tree in trees.items() if f in EMPTIED):
        raise ResetRefused("an in-memory folder the reset empties was not empty at the start")
    return Baseline(init, trees)


def verify(view: hostview.ProcessView, baseline: Baseline) -> Outcome:
    """After the server's reset: make sure, from this machine, that nothing of the last sample is left
    that the filesystem's restore does not handle. Raises ResetRefused naming what is left."""
    out = Outcome()
    others = view.others()
    if others is None:
        raise ResetRefused("this machine can no longer tell the sandbox's processes apart")
    if others:
        left = view.kill_until_gone(others, everything_else=True)
        out.killed = len(others)
        if left:
            raise ResetRefused(f"{len(left)} process(es) of the last sample survived the reset and a kill from "
                               "the host")
    sockets = hostview.socket_count(view.init_pid)
    if sockets is None:
        raise ResetRefused("this machine cannot read the sandbox's sockets")
    if sockets:
        hostview.destroy_sockets(view.init_pid)
        if hostview.socket_count(view.init_pid) != 0:
            raise ResetRefused(f"{sockets} TCP socket(s) of the last sample could not be closed")
        out.sockets_closed = sockets
    ipc = hostview.sysv_ipc_count(view.init_pid)
    if ipc != 0:
        raise ResetRefused("the sandbox's System V IPC cannot be read" if ipc is None else
                           f"{ipc} System V IPC object(s) of the last sample are left")
    init = hostview.init_fingerprint(view.init_pid)
    if init != baseline.init:
        changed = sorted(k for k in baseline.init if (init or {}).get(k) != baseline.init[k])
        raise ResetRefused(f"the sandbox's first process is not as it started ({', '.join(changed) or 'gone'})")
    for folder, want in baseline.trees.items():
        path = f"{_root(view)}/{folder}"
        skip = DEV_SKIP if folder == "dev" else ()
        have = hostview.entry_times(path, skip)
        if have is not None and have != want:
            hostview.put_times_back(path, want, have)
            have = hostview.entry_times(path, skip)
        if have != want:
            changed = sorted(k for k in set(want) | set(have or {}) if (have or {}).get(k) != want.get(k))
            names = ", ".join(f"/{folder}" + ("" if c == "." else f"/{c}") for c in changed[:5])
            raise ResetRefused(f"/{folder} is not as it started ({names or 'unreadable'})")
    return out
