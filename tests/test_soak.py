"""A short soak (benchmarks/soak.py, 20 runs instead of 1,000): sequential runs in one process leave
no container, network, volume or temporary file behind, and open descriptors do not grow."""
from __future__ import annotations

import importlib.util

from tests.helpers import REPO


def _soak_module():
    spec = importlib.util.spec_from_file_location("insandbox_soak", REPO / "benchmarks" / "soak.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_twenty_sequential_runs_leave_nothing_behind(run_async, tmp_path, docker_image):
    soak = _soak_module()
    fds: list[int] = []
    fig = run_async(soak.soak(20, tmp_path, network="none", image=docker_image,
                              on_run=lambda i: fds.append(soak.open_fds())))
    assert fig["failures"] == []
    before, after = fig["before"]["engine"], fig["after"]["engine"]
    # what the soak left; what an earlier test of this process left is named, as that test's failure
    assert fig["containers_left"] == [], fig
    assert (after["own_networks"], after["own_volumes"]) == (before["own_networks"], before["own_volumes"]), fig
    assert before["own_containers"] == 0, f"an earlier test left {before['own_container_names']}"
    assert fig["before"]["tmp_files"] == fig["after"]["tmp_files"] == 0, fig  # nothing left in the temp folder
    # the first runs open the engine's and the model's connection pools; after that the count holds
    assert max(fds[10:]) <= max(fds[:10]), fds
