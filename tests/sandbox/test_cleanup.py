"""Pure functions: schemas, argument parsing, text tool calls, output clipping, prompts, archives."""
from __future__ import annotations

import os
import socket

from insandbox.sandbox.cleanup import leftover_reason
from insandbox.sandbox.docker import LABEL_OWNER


def test_cleanup_only_takes_what_is_safe():
    me = f"{socket.gethostname()}:{os.getpid()}"
    dead = f"{socket.gethostname()}:999999999"
    other_host = "some-other-host:1"
    assert leftover_reason({"State": "exited", "Labels": {LABEL_OWNER: me}}, False) == "not running"
    assert leftover_reason({"State": "running", "Labels": {LABEL_OWNER: me}}, False) == ""
    assert "gone" in leftover_reason({"State": "running", "Labels": {LABEL_OWNER: dead}}, False)
    assert leftover_reason({"State": "running", "Labels": {LABEL_OWNER: other_host}}, False) == ""
    assert leftover_reason({"State": "running", "Labels": {LABEL_OWNER: other_host}}, True) == "--all"

