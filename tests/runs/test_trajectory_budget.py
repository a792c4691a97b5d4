"""A trajectory.json is loaded within MEMORY_FACTOR times its size plus MEMORY_BASE: honest large ones load
(long observations, code full of braces, log probabilities), files of tiny values are refused before this
process spends anything on them. Memory is read from the kernel's accounting of a fresh process (no engine)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from insandbox.core.trajectory import StepRecord, ToolCallRecord, Trajectory
from insandbox.runs.trajectory_budget import (
    MEMORY_BASE,
    MEMORY_FACTOR,
    TRIAL_ABOVE,
    TrajectoryTooCostly,
    load_trajectory,
    memory_budget,
)

MIB = 1024 ** 2
CODE = ('def f(x):\n    return {"a": [x, {"b": (1, 2)}], \'c\': "q\\"uote"}  # café 中文\n' * 250)[:15_990] + " 🙂"


def observations(size: int) -> str:
    """Steps of 16,000-character outputs of code (each also in the conversation), as insandbox writes them."""
    t = Trajectory(run_id="o")
    for i in range(1, size // (2 * len(json.dumps(CODE))) + 2):
        t.add_step(StepRecord(index=i, started_at=0.0, tool_calls=[ToolCallRecord(
            id=f"c{i}", name="execute_bash", arguments=json.dumps({"command": "cat f.py"}), output=CODE)]))
        t.messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": CODE})
    return t.to_json()


def logprobs(size: int) -> str:
    """Steps whose replies carry --logprobs with 20 alternatives per token."""
    vocab = [f"tok{i}" for i in range(500)]
    tokens = [{"token": vocab[t % 500], "logprob": -(t % 97) / 7.0,
               "top": {vocab[(t + k) % 500]: -(k + t % 13) / 3.0 for k in range(20)}} for t in range(2000)]
    per_step = len(Trajectory(run_id="x", steps=[StepRecord(index=1, started_at=0.0, logprobs=tokens)]).to_json())
    t = Trajectory(run_id="l")
    for i in range(1, size // per_step + 2):
        t.add_step(StepRecord(index=i, started_at=0.0, content="...", logprobs=tokens))
    return t.to_json()


def compact(text: str) -> str:
    """The same trajectory re-saved without any indentation (as a tool of one's own might)."""
    return json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)


def dense(item: str, size: int, where: str = "steps") -> str:
    return '{"run_id": "d", "' + where + '": [' + ",".join([item] * (size // (len(item) + 1))) + "]}"


MEASURE = """
import json, resource, sys
from insandbox.runs.trajectory_budget import load_trajectory

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))

# the peak from here on (ru_maxrss would count what this process held as a fork of pytest, before its exec)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
base = status("VmRSS")
raw = open(sys.argv[1], "rb").read()
try:
    t = load_trajectory(raw, sys.argv[1])
    outcome = f"loaded {len(t.steps)} steps"
except ValueError as e:
    outcome = str(e)
print(json.dumps({"outcome": outcome, "held": status("VmHWM") - base,
                  "child": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))
"""


def measured(path) -> dict:
    """Load `path` as replay does, in a fresh process: what it says, the memory it took beyond what it held
    before, and the peak of the child that tried the load first."""
    r = subprocess.run([sys.executable, "-c", MEASURE, str(path)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("make", [observations, logprobs, lambda n: compact(observations(n)),
                                  lambda n: compact(logprobs(n))],
                         ids=["observations", "logprobs", "observations, compact", "logprobs, compact"])
def test_honest_large_trajectories_load_within_the_budget(make, tmp_path):
    path = tmp_path / "trajectory.json"
    path.write_text(make(40 * MIB))
    size = path.stat().st_size
    assert size > 5 * TRIAL_ABOVE  # tried in a child first
    m = measured(path)
    assert m["outcome"].startswith("loaded"), m
    assert m["held"] < memory_budget(size) and m["held"] < 8 * size, m  # in fact 3 to 5 times its size


@pytest.mark.parametrize("item, where", [('{"index":1,"started_at":0}', "steps"), ("{}", "messages"), ("{}", "task"),
                                         ("[]", "task"), ('{"id":"","name":"","arguments":""}', "failed_requests")],
                         ids=["step records", "messages", "dicts kept as they are", "lists", "not even valid"])
def test_a_file_of_tiny_values_is_refused_before_this_process_spends_anything(item, where, tmp_path):
    path = tmp_path / "trajectory.json"
    text = dense(item, 40 * MIB, "pad" if where == "task" else where)
    if where == "task":  # kept as it is: dict[str, Any]
        text = text.replace('"pad": [', '"task": {"pad": [', 1) + "}"
    path.write_text(text)
    size = path.stat().st_size
    m = measured(path)
    if item.startswith('{"id"'):  # not even valid: its million errors would take more than the budget too
        assert "loading it would take more than" in m["outcome"], m
    else:
        assert f"loading it would take more than {memory_budget(size) / MIB:,.0f} MiB of memory" in m["outcome"], m
        assert f"({MEMORY_FACTOR} times its size, plus {MEMORY_BASE // MIB} MiB)" in m["outcome"]
    assert len(m["outcome"].splitlines()) == 1
    assert m["held"] < 2 * size + 32 * MIB, m  # the file's bytes, and nothing parsed from them here
    assert m["child"] < memory_budget(size) + 256 * MIB, m  # stopped at the budget (plus its interpreter)


def test_small_files_are_loaded_directly_and_bad_ones_say_why_in_one_line(tmp_path):
    t = Trajectory(run_id="small")
    assert load_trajectory(t.to_json().encode(), "x/trajectory.json").run_id == "small"
    for raw, says in ((b"[" * 10 ** 6, "nested more than 200 levels deep"),  # tried in a child: it says why
                      (b"[" * (TRIAL_ABOVE // 2), "nested more than 200 levels deep"),  # loaded here
                      (b'{"run_id": 1}', "run_id: Input should be a valid string")):
        with pytest.raises(ValueError, match=says) as e:
            load_trajectory(raw, "x/trajectory.json")
        assert not isinstance(e.value, TrajectoryTooCostly) and str(e.value).startswith("x/trajectory.json: ")
        assert len(str(e.value).splitlines()) == 1
