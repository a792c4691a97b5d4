"""`insandbox clean` decides from the owner label alone: a sandbox whose owner is alive is never
taken (it may be starting, or its files may be being copied back), whatever its state."""
from __future__ import annotations

import os
import socket

from insandbox.sandbox.docker import LABEL_OWNER, owner_label, process_start
from insandbox.sandbox.docker.cleanup import leftover_reason


def _c(state: str, owner: str) -> dict:
    return {"State": state, "Labels": {LABEL_OWNER: owner}}


def test_cleanup_only_takes_sandboxes_whose_owner_is_gone():
    me = owner_label()
    host = socket.gethostname()
    assert me == f"{host}:{os.getpid()}:{process_start(os.getpid())}"
    # still being created, or stopped, by a live owner: kept (regression: "created" was taken)
    for state in ("created", "exited", "running"):
        assert leftover_reason(_c(state, me), False) == ""
    assert "gone" in leftover_reason(_c("running", f"{host}:999999999:1"), False)
    assert "gone" in leftover_reason(_c("created", f"{host}:999999999"), False)  # labels of insandbox 0.1
    # the pid lives on, but as another process (started at another time): the owner is gone
    assert "another process" in leftover_reason(_c("running", f"{host}:{os.getpid()}:1"), False)
    assert leftover_reason(_c("exited", "some-other-host:1:1"), False) == ""  # cannot tell: kept
    assert leftover_reason(_c("exited", ""), False) == ""
    assert leftover_reason(_c("running", me), True) == "--all"
