"""ATIF out and in (formats/): what insandbox exports is valid against Harbor's own ATIF-v1.8 models,
loaded from Harbor's published wheel (its other modules are never imported), and export, validate,
import and export again give the same file. Real runs against the scripted model; hostile files refused
in one line."""
from __future__ import annotations

import json
import os
import sys
import types
import zipfile
from pathlib import Path

import pytest

from insandbox.core.trajectory import Trajectory
from insandbox.formats.atif import from_atif, to_atif
from tests.helpers import cli

WHEEL_CACHE = Path(os.environ.get("INSANDBOX_WHEEL_CACHE", Path.home() / ".cache/insandbox/wheels"))


@pytest.fixture(scope="module")
def harbor(tmp_path_factory):
    """Harbor's trajectory models and validator, from its wheel (Harbor needs Python 3.12: not installed)."""
    wheels = sorted(WHEEL_CACHE.glob("harbor-0.26.0-*.whl"))
    if not wheels:
        pytest.fail(f"Harbor's wheel is not in {WHEEL_CACHE}: `INSANDBOX_PROFILE=full bash scripts/setup.sh` "
                    "fetches it")
    root = tmp_path_factory.mktemp("harbor")
    with zipfile.ZipFile(wheels[0]) as z:
        z.extractall(root, [n for n in z.namelist() if n.startswith("harbor/models/trajectories/")
                            or n == "harbor/utils/trajectory_validator.py"])
    saved = {k: v for k, v in sys.modules.items() if k == "harbor" or k.startswith("harbor.")}
    for name in ("harbor", "harbor.models", "harbor.utils"):  # empty packages: nothing else of Harbor runs
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(root / name.replace(".", "/"))]
        sys.modules[name] = pkg
    from harbor.models.trajectories import Trajectory as AtifTrajectory
    from harbor.utils.trajectory_validator import TrajectoryValidator
    yield AtifTrajectory, TrajectoryValidator
    for k in [k for k in sys.modules if k == "harbor" or k.startswith("harbor.")]:
        del sys.modules[k]
    sys.modules.update(saved)


def _valid(harbor, doc: dict) -> None:
    model, validator = harbor
    model.model_validate(doc)  # raises on any field of the wrong kind, extra fields, steps out of order
    v = validator()
    assert v.validate(doc), getattr(v, "errors", None)


SCRIPT = {"scripts": [{"match": "", "turns": [
    {"tool": "execute_bash", "args": {"command": "echo 42 > /testbed/answer.txt; ls /testbed"}},
    {"content": "no tool call this time"},
    {"tool": "str_replace_editor", "args": {"command": "create", "path": "/testbed/output/a.txt", "file_text": "x\n"}},
    {"tool": "submit"}]}]}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, docker_image):
    from insandbox.models.scripted_server import ScriptedServer

    out = tmp_path_factory.mktemp("run") / "r"
    srv = ScriptedServer(SCRIPT).start()
    try:
        r = cli("run", "write 42", "--model", "m", "--base-url", srv.url, "--api-key", "k", "--out", str(out),
                "--network", "none", "--image", docker_image, timeout=300)
    finally:
        srv.stop()
    assert r.returncode == 0, r.stderr[-2000:]
    return out


def test_a_run_exports_valid_atif_and_comes_back_the_same(harbor, run_dir, tmp_path):
    first = tmp_path / "a.json"
    r = cli("export", "atif", str(run_dir), "--out", str(first))
    assert r.returncode == 0, r.stderr
    doc = json.loads(first.read_text())
    _valid(harbor, doc)
    assert doc["schema_version"] == "ATIF-v1.8" and doc["agent"]["name"] == "insandbox"
    sources = [s["source"] for s in doc["steps"]]
    assert sources[:2] == ["system", "user"] and sources.count("agent") == 4
    assert [s["step_id"] for s in doc["steps"]] == list(range(1, len(doc["steps"]) + 1))
    bash = next(s for s in doc["steps"] if s.get("tool_calls"))
    call = bash["tool_calls"][0]
    assert call["function_name"] == "execute_bash" and call["arguments"]["command"].startswith("echo 42")
    assert bash["observation"]["results"][0]["source_call_id"] == call["tool_call_id"]
    assert "answer.txt" in bash["observation"]["results"][0]["content"]
    assert bash["metrics"]["prompt_tokens"] > 0 and doc["final_metrics"]["total_steps"] == len(doc["steps"])
    assert "user" in sources[3:]  # the reminder after the reply without a tool call
    # import it, and export again: the same file
    back = tmp_path / "imported"
    assert cli("import", "atif", str(first), "--out", str(back)).returncode == 0
    again = tmp_path / "b.json"
    assert cli("export", "atif", str(back), "--out", str(again)).returncode == 0
    assert again.read_bytes() == first.read_bytes()
    original = Trajectory.load(run_dir / "trajectory.json")
    assert Trajectory.load(back / "trajectory.json").model_dump() == original.model_dump()


def test_rollout_records_carry_their_token_ids_and_logprobs(harbor, run_dir, tmp_path):
    traj = json.loads((run_dir / "trajectory.json").read_text())
    rec = {"id": "t/g0/s0", "task_id": "t", "prompt_ids": [1, 2, 3],
           "response_ids": [10, 11, 20, 21, 22, 30, 40, 41, 50], "response_mask": [1, 1, 0, 0, 0, 1, 0, 0, 1],
           "response_logprobs": [-0.1, -0.2, None, None, None, -0.3, None, None, -0.5], "reward": 1.0,
           "trajectory": traj}
    (tmp_path / "rollouts.jsonl").write_text(json.dumps(rec) + "\n")
    r = cli("export", "atif", str(tmp_path), "--out", str(tmp_path / "atif"))
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "atif" / "t__g0__s0.json").read_text())
    _valid(harbor, doc)
    agent = [s["metrics"] for s in doc["steps"] if s["source"] == "agent"]
    assert agent[0]["prompt_token_ids"] == [1, 2, 3] and agent[0]["completion_token_ids"] == [10, 11]
    assert agent[0]["logprobs"] == [-0.1, -0.2]
    assert agent[1]["prompt_token_ids"] == [1, 2, 3, 10, 11, 20, 21, 22] and agent[1]["completion_token_ids"] == [30]
    assert doc["extra"]["rollout"]["reward"] == 1.0


def test_a_benchmark_folder_exports_every_sample(harbor, scripted, tmp_path, docker_image):
    from tests.bench.harbor.tasks import RIGHT, model, write_task

    write_task(tmp_path / "ds", "one")
    write_task(tmp_path / "ds", "two")
    srv = scripted(model(("one", [RIGHT]), ("two", [RIGHT])))
    out = tmp_path / "out"
    r = cli("bench", str(tmp_path / "ds"), "--model", "m", "--base-url", srv.url, "--out", str(out), "-q",
            timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    r = cli("export", "atif", str(out))
    assert r.returncode == 0 and "2 ATIF files" in r.stdout, r.stderr
    files = sorted((out / "atif").iterdir())
    assert [f.name for f in files] == ["one__samples__sandbox__one__r0.json", "two__samples__sandbox__two__r0.json"]
    for f in files:
        doc = json.loads(f.read_text())
        _valid(harbor, doc)
        assert doc["extra"]["insandbox"]["verification"]["reward"] == 1.0


def test_another_producers_trajectory_imports_as_a_run(harbor, tmp_path):
    foreign = {"schema_version": "ATIF-v1.6", "session_id": "s-1",
               "agent": {"name": "other-agent", "version": "2.0", "model_name": "some-model"},
               "steps": [{"step_id": 1, "source": "user", "message": "List the files."},
                         {"step_id": 2, "source": "agent", "message": "Looking.", "timestamp": "2026-01-01T00:00:00Z",
                          "tool_calls": [{"tool_call_id": "c1", "function_name": "bash", "arguments": {"cmd": "ls"}}],
                          "observation": {"results": [{"source_call_id": "c1", "content": "a.txt\n"}]},
                          "metrics": {"prompt_tokens": 12, "completion_tokens": 5, "logprobs": [-0.5]}},
                         {"step_id": 3, "source": "agent", "message": "There is a.txt."}]}
    _valid(harbor, foreign)
    path = tmp_path / "foreign.json"
    path.write_text(json.dumps(foreign))
    r = cli("import", "atif", str(path), "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr
    traj = Trajectory.load(tmp_path / "run" / "trajectory.json")
    assert [m["role"] for m in traj.messages] == ["user", "assistant", "tool", "assistant"]
    assert [s.tool_calls[0].output if s.tool_calls else None for s in traj.steps] == ["a.txt\n", None]
    assert traj.totals.prompt_tokens == 12 and traj.config["model"] == "some-model"
    _valid(harbor, to_atif(from_atif(foreign)))  # and out again, valid


@pytest.mark.parametrize("content, says", [
    (b"not json", "not JSON"), (b"[" * 5000 + b"]" * 5000, "nested more than"),
    (b'{"schema_version": "v2", "steps": []}', "not an ATIF trajectory"),
    (b'{"schema_version": "ATIF-v1.8", "steps": []}', "at least one step"),
    (b'{"schema_version": "ATIF-v1.8", "steps": [{"source": "agent", "metrics": {"prompt_tokens": "many"}}]}',
     "insandbox can read"),
])
def test_a_bad_file_is_refused_in_one_line(tmp_path, content, says):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    r = cli("import", "atif", str(path), "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "run" / "trajectory.json").exists()
