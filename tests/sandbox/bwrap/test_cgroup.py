"""Where a bwrap sandbox's cgroup goes: this machine's own hierarchies (cgroup v1 here, as root), and
cgroup v2 layouts laid out as folders (a delegated subtree, a process's own cgroup that holds
processes, a cgroup namespace's mount root), read by the same code from their mountinfo and
/proc/self/cgroup texts."""
from __future__ import annotations

import os
from pathlib import Path

from insandbox.sandbox.bwrap import cgroup


def _v2_tree(top: Path, layout: dict[str, dict[str, str]]) -> None:
    for rel, files in layout.items():
        d = top / rel
        d.mkdir(parents=True, exist_ok=True)
        for name in ("cgroup.controllers", "cgroup.subtree_control", "cgroup.procs"):
            (d / name).write_text(files.get(name, ""))


def test_this_machines_own_cgroup_holds_the_sandboxes_groups_as_root():
    found, why = cgroup.places()
    assert os.geteuid() == 0 and "memory" in found, why
    own = dict(line.split(":", 2)[1:] for line in Path("/proc/self/cgroup").read_text().splitlines())
    place = found["memory"]
    if place.version == 1:  # under this process's own memory cgroup: a job's limits still bound it
        assert str(place.parent).endswith(own["memory"].rstrip("/")) or own["memory"] == "/"


def test_cgroup_v2_a_delegated_ancestor_not_the_processs_own_cgroup(tmp_path):
    _v2_tree(tmp_path, {
        "": {"cgroup.controllers": "cpu memory pids", "cgroup.subtree_control": "memory pids"},
        "user.slice": {"cgroup.controllers": "memory pids", "cgroup.subtree_control": "memory pids"},
        "user.slice/job.scope": {"cgroup.controllers": "memory pids", "cgroup.procs": "4242\n"},
    })
    mountinfo = f"41 31 0:38 / {tmp_path} rw,relatime - cgroup2 cgroup2 rw\n"
    found, why = cgroup.places(mountinfo, "0::/user.slice/job.scope\n")
    assert found["memory"] == cgroup.Place(2, tmp_path / "user.slice") == found["pids"], why
    # only the root has cpu to give: a process is in one v2 cgroup, so not there, apart from its memory
    assert "cpu" not in found


def test_cgroup_v2_nothing_writable_or_no_controller_means_no_place(tmp_path):
    _v2_tree(tmp_path, {
        "": {"cgroup.controllers": "pids", "cgroup.subtree_control": "pids"},
        "a": {"cgroup.controllers": "pids", "cgroup.procs": "1\n"},
    })
    mountinfo = f"41 31 0:38 / {tmp_path} rw,relatime - cgroup2 cgroup2 rw\n"
    found, why = cgroup.places(mountinfo, "0::/a\n")
    assert "memory" not in found and why
    # a hybrid machine: the unified hierarchy has no controller, memory is a v1 hierarchy's
    (tmp_path / "v1" / "job").mkdir(parents=True)
    (tmp_path / "v1" / "job" / "cgroup.procs").write_text("")
    mountinfo += f"35 31 0:32 / {tmp_path / 'v1'} rw,relatime - cgroup cgroup rw,memory\n"
    found, _ = cgroup.places(mountinfo, "4:memory:/job\n0::/a\n")
    assert found["memory"] == cgroup.Place(1, tmp_path / "v1" / "job")


def test_a_cgroup_namespaces_mount_root_is_taken_into_account(tmp_path):
    """In a cgroup namespace the mount shows the hierarchy from its root down: the path of this process's
    cgroup is read below that root, and one outside what the mount shows is no place."""
    (tmp_path / "inner").mkdir()
    (tmp_path / "inner" / "cgroup.procs").write_text("")
    mountinfo = f"35 31 0:32 /outer {tmp_path} rw,relatime - cgroup cgroup rw,memory\n"
    found, _ = cgroup.places(mountinfo, "4:memory:/outer/inner\n")
    assert found["memory"] == cgroup.Place(1, tmp_path / "inner")
    found, _ = cgroup.places(mountinfo, "4:memory:/elsewhere\n")
    assert "memory" not in found


def test_the_switch_takes_three_values_and_refuses_others_in_one_line(monkeypatch):
    for value, mode in (("", "auto"), ("cgroup", "cgroup"), ("RLIMIT", "rlimit")):
        monkeypatch.setenv(cgroup.MODE_ENV, value)
        assert cgroup.mode() == mode
    monkeypatch.setenv(cgroup.MODE_ENV, "always")
    try:
        cgroup.mode()
        raise AssertionError("accepted")
    except ValueError as e:
        assert "always" in str(e) and "\n" not in str(e)
