"""Joining a cluster: a wrong address is one clear error at once (no cluster needed here)."""
from __future__ import annotations

import pytest

from insandbox.config import ConfigError
from insandbox.distributed.cluster import _weight, connect


def test_an_address_nobody_answers_or_a_malformed_one_fails_at_once():
    with pytest.raises(ConfigError, match=r"--ray 127\.0\.0\.1:1: no Ray cluster answers there"):
        connect("127.0.0.1:1")
    for bad in ("headnode", "host:port", ":6379"):
        with pytest.raises(ConfigError, match="give auto or the head node's HOST:PORT"):
            connect(bad)


def test_a_nodes_share_is_its_insandbox_resource_else_its_cpus():
    assert _weight({"Resources": {"CPU": 8.0, "insandbox": 32.0}}) == 32.0
    assert _weight({"Resources": {"CPU": 8.0}}) == 8.0
    assert _weight({"Resources": {}}) == 1.0
