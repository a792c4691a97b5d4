"""`insandbox fork`: replay to step k, snapshot, N branches going on with another model."""
from __future__ import annotations

import json

from insandbox import Trajectory, arun
from tests.helpers import cli

ORIGINAL = {"turns": [
    {"tool": "execute_bash", "args": {"command": "mkdir -p /tmp/w && cd /tmp/w && export V=exported && "
                                                 "HIDDEN=plain && greet() { echo hi $1; } && echo base > data.txt"}},
    {"tool": "execute_bash", "args": {"command": "echo more >> data.txt"}},
    {"tool": "execute_bash", "args": {"command": "echo the original went on"}},
    {"tool": "submit"}]}

# played from the third model turn on (two assistant turns are already in the conversation)
BRANCH = {"turns": [
    {"content": "never played"}, {"content": "never played"},
    {"tool": "execute_bash", "args": {"command": "[ -e /tmp/w/mark ] && echo SAW-ANOTHER-BRANCH || echo alone; "
                                                 "touch mark; echo \"$PWD|$V|$HIDDEN|$(greet you)|$(tr '\\n' + "
                                                 "< data.txt)\""}},
    {"tool": "execute_bash", "args": {"command": "ls /tmp/w > /testbed/answer.txt"}},
    {"tool": "submit"}]}


def test_fork_at_step_2_gives_each_branch_the_state_of_step_2_and_nothing_of_the_others(scripted, run_async,
                                                                                        tmp_path, docker_image):
    run = tmp_path / "run"
    original = scripted(ORIGINAL)
    run_async(arun("do it", model="orig", base_url=original.url, output_dir=run, image=docker_image, max_steps=10))
    branch_model = scripted(BRANCH)
    r = cli("fork", str(run), "--step", "2", "--branches", "2", "--model", "brancher", "--base-url", branch_model.url,
            "--prompt-append", "What if you checked the state?", "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert [b["exit_reason"] for b in summary["branches"]] == ["submitted", "submitted"]
    assert summary["replay"]["identical"] == 2 and summary["replay"]["differing"] == 0
    for i in (1, 2):
        folder = run / "forks/step-2" / f"branch-{i}"
        t = Trajectory.load(folder / "trajectory.json")
        assert t.config["fork"]["step"] == 2 and t.config["model"] == "brancher"
        assert [s.index for s in t.steps] == [1, 2, 3, 4, 5]
        assert t.steps[1].tool_calls[0].arguments == json.dumps({"command": "echo more >> data.txt"})  # recorded
        first_own = t.steps[2].tool_calls[0].output
        assert "alone" in first_own and "SAW-ANOTHER-BRANCH" not in first_own
        assert "/tmp/w|exported|plain|hi you|base+more+" in first_own
        assert (folder / "answer.txt").read_text().split() == ["data.txt", "mark"]
        # the model saw the recorded prefix, then the appended message
        sent = [q for q in branch_model.requests if q["turn"] == 2][0]["messages"]
        assert [m["role"] for m in sent][-2:] == ["tool", "user"]
        assert sent[-1]["content"] == "What if you checked the state?"
        assert "the original went on" not in json.dumps(sent)
    assert "2 branches after step 2" in r.stderr

    r = cli("fork", str(run), "--step", "9", "--branches", "2", "--base-url", branch_model.url)
    assert r.returncode == 2 and "--step 9: the run has steps 1..4" in r.stderr


def test_the_prefix_ends_before_the_next_reply_and_the_task_text_can_be_replaced():
    import pytest

    from insandbox.replay.fork import prefix_messages, with_new_task
    from insandbox.replay.replayer import ReplayError

    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "Task: add 1+1. Be brief."},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]}, {"role": "tool", "content": "r1"},
            {"role": "assistant", "content": "no call"}, {"role": "user", "content": "nudge"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "3"}]}, {"role": "tool", "content": "r3"}]
    assert prefix_messages(msgs, 0) == msgs[:2]
    assert prefix_messages(msgs, 1) == msgs[:4]
    assert prefix_messages(msgs, 2) == msgs[:6]
    assert prefix_messages(msgs, 3) == msgs
    new = with_new_task(prefix_messages(msgs, 1), "add 1+1", "add 2+2")
    assert new[1]["content"] == "Task: add 2+2. Be brief." and msgs[1]["content"] == "Task: add 1+1. Be brief."
    with pytest.raises(ReplayError, match="not in the first user message"):
        with_new_task(prefix_messages(msgs, 1), "something else", "x")
