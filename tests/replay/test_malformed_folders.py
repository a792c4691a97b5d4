"""Malformed run folders: `insandbox replay` and `insandbox fork` refuse each in one line, exit 2, never a
traceback, before anything starts (no engine needed: nothing may start).

A fixed set of hostile trajectory.json files (nested past any parser's depth, wrong types everywhere,
NaN and huge numbers, invalid UTF-8, cut short, not a file at all, made of so many tiny values that it
would take gigabytes to load), then a seeded fuzz: random mutations of a valid recorded trajectory,
through the same code in process (many) and through the real command line (some). A mutation may also
leave a folder that loads: then the command is stopped by a refusal that comes after every check of
the folder (replay: an unknown --backend; fork: a branch folder in the way), so it too ends in one line.
"""
from __future__ import annotations

import asyncio
import copy
import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from insandbox.config import ConfigError, RunConfig
from insandbox.core.trajectory import StepRecord, ToolCallRecord, Trajectory
from insandbox.replay.fork import fork_run
from insandbox.replay.replayer import Replayer, ReplayError, load_recorded
from insandbox.runs.inputs import InputsMissing
from insandbox.runs.safe_files import UnsafeRunFolder

DEAD_SERVER = "http://127.0.0.1:9/v1"  # never asked: every case is refused before a branch starts
DEEP = "@@DEEP@@"  # replaced by 100,000 levels of nesting once serialized (json.dumps would recurse)
BAD = (ReplayError, UnsafeRunFolder, InputsMissing, ConfigError)  # what the CLI reports in one line, exit 2


def valid() -> dict:
    """A sandbox-mode run of two steps, as `insandbox run` records one."""
    cfg = RunConfig(model="m", base_url=DEAD_SERVER)
    t = Trajectory(run_id="r1", mode="sandbox", config={**cfg.public(), "model": "m"},
                   task={"id": "t", "prompt": "do it", "input_dir": None, "input_files": [],
                         "prompt_config": "default", "input_digests": {},
                         "sandbox_dirs": {"working_dir": "/testbed", "input_dir": "/testbed/input",
                                          "output_dir": "/testbed/output"}},
                   tools=[{"type": "function", "function": {"name": "execute_bash", "parameters": {
                       "type": "object", "properties": {"command": {"type": "string"}}}}}],
                   messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "do it"}])
    for i in (1, 2):
        args = json.dumps({"command": f"echo {i}"})
        t.messages += [{"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "execute_bash", "arguments": args}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"{i}\n"}]
        t.add_step(StepRecord(index=i, started_at=1.7e9, prompt_tokens=10, completion_tokens=5, logprobs=[
            {"token": "echo", "logprob": -0.5, "top": {"echo": -0.5, "ls": -1.5}}], tool_calls=[
            ToolCallRecord(id=f"c{i}", name="execute_bash", arguments=args, output=f"{i}\n", exit_code=0)]))
    return json.loads(t.to_json())


def dumps(data) -> bytes:
    deep = "[" * 100_000 + "]" * 100_000
    return json.dumps(data).replace(json.dumps(DEEP), deep).encode()


def changed(change) -> bytes:
    data = valid()
    change(data)
    return dumps(data)


def step(**fields):
    return lambda t: t["steps"][0].update(fields)


def config(**fields):
    return lambda t: t["config"].update(fields)


GOOD = dumps(valid())
HOSTILE = {
    "nested at the top": ("[" * 100_000 + "]" * 100_000).encode(),
    "nested in the task": changed(lambda t: t.update(task=DEEP)),
    "nested just past the limit": changed(lambda t: t["messages"][1].update(content=json.loads("[" * 202 + "]" * 202))),
    "nested, with a lone surrogate": changed(lambda t: t.update(run_id="\ud800", task={"deep": DEEP})),
    "nested in a step's logprobs": changed(step(logprobs=[DEEP])),
    "a list": b"[]",
    "a string": b'"trajectory"',
    "steps null": changed(lambda t: t.update(steps=None)),
    "steps of strings": changed(lambda t: t.update(steps=["a", "b"])),
    "a step null": changed(lambda t: t["steps"].__setitem__(0, None)),
    "index as text": changed(step(index="one")),
    "index NaN": changed(step(index=float("nan"))),
    "tokens of 5000 digits": dumps(valid()).replace(b'"prompt_tokens": 10', b'"prompt_tokens": ' + b"9" * 5000, 1),
    "tokens 1e400": dumps(valid()).replace(b'"prompt_tokens": 10', b'"prompt_tokens": 1e400', 1),
    "tool calls a dict": changed(step(tool_calls={"id": "c1"})),
    "a tool call of numbers": changed(step(tool_calls=[{"id": 1, "name": 2, "arguments": 3}])),
    "config a list": changed(lambda t: t.update(config=[])),
    "cpus NaN": changed(config(cpus=float("nan"))),
    "temperature NaN": changed(config(temperature=float("nan"))),
    "timeout infinite": changed(config(timeout_per_command=float("inf"))),
    "memory a number": changed(config(memory=5)),
    "env a list": changed(config(env=["A=1"])),
    "image a dict": changed(config(image={"name": "x" * 100_000})),
    "task a string": changed(lambda t: t.update(task="do it")),
    "sandbox dirs a list": changed(lambda t: t["task"].update(sandbox_dirs=["/testbed"])),
    "messages a dict": changed(lambda t: t.update(messages={"role": "user"})),
    "messages of strings": changed(lambda t: t.update(messages=["hello"])),
    "run_id a number": changed(lambda t: t.update(run_id=7)),
    "schema version as text": changed(lambda t: t.update(schema_version="99")),
    "schema version a list": changed(lambda t: t.update(schema_version=[3])),
    "mode a number": changed(lambda t: t.update(mode=1)),
    "invalid UTF-8": GOOD.replace(b'"do it"', b'"do \xff\xfe it"', 1),
    "a UTF-16 surrogate in UTF-8": GOOD.replace(b'"do it"', b'"\xed\xa0\x80"', 1),
    "cut short": GOOD[:len(GOOD) // 2],
    "empty": b"",
    "whitespace": b" \n\t ",
    "a byte-order mark": b"\xef\xbb\xbf" + GOOD,
    "trailing text": GOOD + b" {}",
    # 24 MiB of two-field step records: 1.4 GB once loaded, past the budget of 12 times its size + 256 MiB
    "dense": b'{"run_id": "d", "mode": "sandbox", "steps": [' + b",".join([b'{"index":1,"started_at":0}'] * 900_000)
             + b"]}",
}


def not_a_file(run: Path, kind: str, elsewhere: Path) -> None:
    path = run / "trajectory.json"
    if kind == "a folder":
        path.mkdir()
        (path / "trajectory.json").write_bytes(GOOD)
    elif kind == "a FIFO":
        os.mkfifo(path)  # opened, a reader would wait for a writer forever
    elif kind == "a symbolic link":
        (elsewhere / "trajectory.json").write_bytes(GOOD)
        path.symlink_to(elsewhere / "trajectory.json")
    elif kind == "a socket":
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))


def clis(argvs: list[list[str]], timeout: float = 120) -> list[subprocess.CompletedProcess]:
    """The commands run side by side (each is mostly the interpreter starting)."""
    exe = Path(sys.executable).parent / "insandbox"
    procs = [subprocess.Popen([str(exe), *a], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for a in argvs]
    done = []
    for argv, p in zip(argvs, procs):
        try:
            out, err = p.communicate(timeout=timeout)
        finally:
            p.kill()
        done.append(subprocess.CompletedProcess(argv, p.returncode, out, err))
    return done


def assert_one_line(r: subprocess.CompletedProcess, case: str) -> str:
    assert r.returncode == 2, (case, r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and r.stdout == "", (case, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("insandbox: "), (case, r.stderr[-2000:])
    return lines[0]


def commands(run: Path, blocked: Path) -> list[list[str]]:
    """replay and fork of `run`, each stopped by a refusal after the folder's checks should the folder pass."""
    return [["replay", str(run), "--backend", "no-such-backend"],
            ["fork", str(run), "--step", "1", "--branches", "1", "--base-url", DEAD_SERVER, "--out", str(blocked)]]


@pytest.fixture
def blocked(tmp_path) -> Path:
    """An --output-dir whose branch-1 is in use: a fork that got that far is refused there."""
    (tmp_path / "blocked/branch-1").mkdir(parents=True)
    (tmp_path / "blocked/branch-1/used").write_text("")
    return tmp_path / "blocked"


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_malformed_trajectory_is_refused_in_one_line_by_replay_and_fork(case, tmp_path, blocked):
    run = tmp_path / "run"
    run.mkdir()
    (run / "trajectory.json").write_bytes(HOSTILE[case])
    for r in clis(commands(run, blocked)):
        line = assert_one_line(r, case)
        assert "trajectory.json" in line, (case, line)  # it says which file is at fault
        assert "already exists" not in line and "no-such-backend" not in line, (case, line)  # the folder's fault
    if case == "dense":
        assert "too many small values for a trajectory of its size" in line


@pytest.mark.parametrize("kind", ["a folder", "a FIFO", "a symbolic link", "a socket"])
def test_a_trajectory_that_is_not_a_plain_file_is_refused_in_one_line(kind, tmp_path, blocked):
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    elsewhere.mkdir()
    not_a_file(run, kind, elsewhere)
    for r in clis(commands(run, blocked), timeout=60):
        line = assert_one_line(r, kind)
        shown = kind if kind in ("a folder", "a symbolic link") else "a special file"
        assert f"{run / 'trajectory.json'} is {shown}" in line, line


def test_the_valid_folder_passes_every_check_of_the_folder(tmp_path, blocked):
    """The fuzz's starting point, and proof that its stops come after the folder's checks."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "trajectory.json").write_bytes(GOOD)
    replay, fork = (assert_one_line(r, "valid") for r in clis(commands(run, blocked)))
    assert "unknown sandbox backend 'no-such-backend'" in replay
    assert f"{blocked / 'branch-1'} already exists and is not empty" in fork


WEIRD = [None, [], {}, "", "1", "x" * 300, 0, -1, 10 ** 20, 2 ** 63, 1e308, float("nan"), float("inf"), True,
         [None], {"": None}, {"role": 5}, DEEP, "\ud800", "/..", "../../etc"]


def mutate(rng: random.Random) -> bytes:
    """A valid trajectory with one random change: a value replaced by one of another kind, a key or an
    item dropped, or the bytes cut, spliced or flipped."""
    data = valid()
    if rng.random() < 0.25:
        raw = bytearray(dumps(data))
        at = rng.randrange(len(raw))
        choice = rng.randrange(3)
        if choice == 0:
            return bytes(raw[:at])
        if choice == 1:
            return bytes(raw[:at] + rng.choice([b"\xff", b"\x00", b"{", b"[", b'"', b"\\", b",", b"\xed\xa0\x80"])
                         + raw[at:])
        raw[at] = rng.randrange(256)
        return bytes(raw)
    paths = []

    def walk(node, path):
        paths.append(path)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            walk(v, (*path, k))
    walk(data, ())
    path = rng.choice(paths[1:])
    parent = data
    for k in path[:-1]:
        parent = parent[k]
    if rng.random() < 0.2:
        del parent[path[-1]]
    else:
        parent[path[-1]] = copy.deepcopy(rng.choice(WEIRD))
    return dumps(data)


def test_random_mutations_of_a_valid_trajectory_never_get_past_the_checks_unhandled(tmp_path):
    """In process, as the commands run it up to where a sandbox would start: every outcome is one of the
    refusals the command line reports in one line (or the folder loads)."""
    blocked = tmp_path / "blocked/branch-1"
    blocked.mkdir(parents=True)
    (blocked / "used").write_text("")
    rng = random.Random(20261128)
    outcomes: dict[str, int] = {}
    for i in range(400):
        run = tmp_path / f"m{i}"
        run.mkdir()
        (run / "trajectory.json").write_bytes(mutate(rng))
        for what in ("replay", "fork"):
            try:
                if what == "replay":
                    Replayer(load_recorded(run), [], None)
                else:
                    asyncio.run(fork_run(run, 1, 1, {"base_url": DEAD_SERVER}, output_dir=tmp_path / "blocked"))
                outcomes["loaded"] = outcomes.get("loaded", 0) + 1
            except BAD as e:
                assert len(str(e).strip().splitlines()) == 1 and len(str(e)) < 2000, (i, what, str(e)[:3000])
                if "already exists and is not empty" in str(e):
                    outcomes["loaded"] = outcomes.get("loaded", 0) + 1
                else:
                    outcomes[type(e).__name__] = outcomes.get(type(e).__name__, 0) + 1
    assert outcomes.get("ReplayError", 0) > 100 and outcomes.get("loaded", 0) > 50, outcomes  # both kinds seen


def test_random_mutations_through_the_command_line_end_in_one_line(tmp_path, blocked):
    rng = random.Random(7)
    argvs = []
    for i in range(12):
        run = tmp_path / f"m{i}"
        run.mkdir()
        (run / "trajectory.json").write_bytes(mutate(rng))
        argvs += commands(run, blocked)
    for start in range(0, len(argvs), 4):
        for r in clis(argvs[start:start + 4]):
            assert_one_line(r, f"{r.args[0]} {r.args[1]}")
