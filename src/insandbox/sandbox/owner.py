"""Whose a sandbox is: the process that created it, named so that `insandbox clean` can tell one
whose process is gone from one still in use. Every backend marks its sandboxes with this owner (a
Docker label, a file in a bwrap sandbox's folder).

An owner is "<hostname>:<pid>:<process start time>": a pid alone may be reused by an unrelated
process later, the pid with its start time names one process.
"""
from __future__ import annotations

import os
import socket


def process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot: with the pid, it names one process
    (a pid alone may be reused by an unrelated process later)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rfind(b")") + 2:].split()[19].decode()
    except (OSError, IndexError):
        return ""


def owner_label() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{process_start(os.getpid())}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_gone(owner: str) -> str:
    """Why the owner "<host>:<pid>[:<start>]" is known to be gone, or "" if it may be alive
    (alive, on another host, or unknown)."""
    parts = owner.split(":")
    if len(parts) < 2 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return ""
    pid = int(parts[1])
    if not _pid_alive(pid):
        return f"owner process {pid} is gone"
    if len(parts) > 2 and parts[2] and process_start(pid) != parts[2]:
        return f"owner process {pid} is gone (the pid now belongs to another process)"
    return ""
