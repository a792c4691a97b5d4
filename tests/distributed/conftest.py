"""A local Ray cluster for the tests of insandbox.distributed: several Ray nodes on this machine
(each its own raylet and worker processes, all using this machine's Docker engine), started once
for this package's tests because Ray takes seconds to start, and gone after them (later tests, verl's,
start Ray clusters of their own). Tests that add a node remove it again."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import insandbox


@pytest.fixture(scope="package")
def ray_cluster(docker_image):
    from ray.cluster_utils import Cluster

    # the nodes' workers import the insandbox this process imported (a checkout's src/, say)
    src = str(Path(insandbox.__file__).resolve().parents[1])
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (src, before) if p)
    # a node killed by a test is known dead in seconds (Ray's default: about half a minute)
    checks = {"health_check_period_ms": 500, "health_check_timeout_ms": 500, "health_check_failure_threshold": 3}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "_system_config": checks})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    address_before = os.environ.get("RAY_ADDRESS")
    yield cluster
    import ray

    ray.shutdown()
    cluster.shutdown()
    if address_before is None:
        os.environ.pop("RAY_ADDRESS", None)  # the cluster is gone: nobody may connect to it
    if before is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = before
