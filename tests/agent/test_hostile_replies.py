"""Replies a policy may write to break the loop rather than to solve the task: what it wrote is its own
mistake, told to it as an error it reads (or, where nothing of the reply can be read, a model error),
never insandbox's failure. The whole loop against the scripted OpenAI-compatible server, real sandbox."""
from __future__ import annotations

import json

import pytest

from insandbox import Trajectory, arun
from tests.helpers import containers_with_label


def nested(n: int) -> str:
    return "[" * n + "]" * n


def completion_body(arguments: object) -> str:
    """A chat completion whose one tool call carries `arguments` as JSON, not as its text."""
    call = {"id": "call_deep", "type": "function", "function": {"name": "execute_bash"}}
    head = json.dumps({"choices": [{"index": 0, "finish_reason": "tool_calls",
                                    "message": {"role": "assistant", "content": None, "tool_calls": [call]}}]})
    cut = head.index('"name": "execute_bash"') + len('"name": "execute_bash"')
    return head[:cut] + f', "arguments": {arguments}' + head[cut:]


def hostile_turns(n: int) -> list[dict]:
    deep = nested(n)
    return [
        {"content": deep},                                                   # 0 bare, no tag: no call
        {"content": f"<tool_call>{deep}</tool_call>"},                        # 1 in a tag
        {"content": "<tool_call>" + "[" * n},                                 # 2 in a tag never closed
        {"content": f'<tool_call>{{"name": "execute_bash", "arguments": {deep}}}</tool_call>'},  # 3 as arguments
        {"content": "<tool_call><function=str_replace_editor><parameter=command>view</parameter>"  # 4 Qwen3-Coder
                    f"<parameter=path>/testbed</parameter><parameter=view_range>{deep}</parameter>"
                    "</function></tool_call>"},
        {"tool": "execute_bash", "args": deep},                               # 5 native, the arguments' text
        {"tool": "execute_bash", "args": f'{{"command": {deep}}}'},           # 6 native, inside an object
        {"tool": "execute_bash", "args": '{"command": "echo a", "command": "echo b"}'},  # 7 a key twice
        {"tool": "str_replace_editor", "args": '{"command": "view", "path": "/testbed", "view_range": [1, NaN]}'},
        {"tool": "execute_bash", "args": '{"command": "echo ' + "9" * 5000 + '", "n": ' + "9" * 5000 + "}"},  # 9
        # 10: a body whose arguments are JSON nested past reading: the try fails as not a chat completion,
        # is retried, and the next try answers
        {"tool": "execute_bash", "args": {"command": "echo retried"},
         "fail": {"status": 200, "body": completion_body(nested(n)), "content_type": "application/json"}},
        # 11: arguments as a JSON value nested deeper than insandbox reads, but parseable: the call is refused
        {"tool": "execute_bash", "args": {"command": "echo never"},
         "fail": {"status": 200, "body": completion_body(nested(200)), "content_type": "application/json",
                  "times": 1}},
        {"tool": "execute_bash", "args": {"command": "echo still here"}},   # 12
        {"tool": "submit"},
    ]


@pytest.mark.parametrize("n,stream", [(1000, False), (100_000, False), (1000, True)])
def test_deeply_nested_replies_are_the_models_errors_never_insandbox_s(scripted, run_async, tmp_path,
                                                                         docker_image, n, stream):
    """Regression: a reply of 1,000 nested brackets, with or without a <tool_call> tag, in the text or in
    native arguments, ended the episode as internal_error (RecursionError from json.loads)."""
    turns = hostile_turns(n)
    srv = scripted({"turns": turns})
    result = run_async(arun("hostile", model="m", base_url=srv.url, output_dir=tmp_path, image=docker_image,
                            max_steps=30, stuck_after=None, stream=stream))
    t = Trajectory.load(tmp_path / "trajectory.json")
    assert t.exit_reason == "submitted" and t.exit_cause is None, t.exit_detail
    steps = t.steps
    assert len(steps) == len(turns)  # one step a turn: step 10's failed try was retried within it
    assert steps[0].nudged and steps[0].nudge_reason == "your reply had no tool call"
    for i in (1, 2, 3):
        assert steps[i].nudged and "could not be read" in steps[i].nudge_reason and "64 deep" in steps[i].nudge_reason
    assert steps[4].tool_calls[0].error and "view_range" in steps[4].tool_calls[0].output
    reasons = {5: "64 deep", 6: "64 deep", 7: "appears twice", 8: "NaN is not a JSON number",
               9: "5,000 digits is too long"}
    if stream:  # a stream carries arguments as text: a body that is not events is a failed try, retried
        assert any("not a chat completion" in note for note in steps[11].notes)
    else:
        reasons[11] = "64 deep"
    for i, reason in reasons.items():
        call = steps[i].tool_calls[0]
        assert call.error and reason in call.output, (i, call.output[:300])
    assert any("not a chat completion" in note for note in steps[10].notes)  # the failed try, retried
    assert steps[10].tool_calls[0].output.startswith("retried")
    assert steps[12].tool_calls[0].output.startswith("still here")
    assert result.exit_reason == "submitted" and containers_with_label(f"insandbox.run_id={t.run_id}") == []
    # what the model read said why: the server got one tool message per call id
    last = srv.requests[-1]["messages"]
    told = [m["content"] for m in last if m["role"] == "tool" and "not valid JSON" in m["content"]]
    assert len(told) == 5 + (not stream) and all("send one JSON object" in m for m in told)


def test_a_reply_of_50_calls_runs_16_and_the_rest_are_told_not_run(scripted, run_async, tmp_path, docker_image):
    """Regression: all 50 tool calls of one reply ran (no cap). The first 16 (the default,
    --max-tool-calls-per-reply) run in order; each later one gets a tool message saying it was not run, so
    the server still gets one answer per call id; a lower cap is taken as given."""
    calls = [{"name": "execute_bash", "arguments": {"command": f"echo {i} >> /testbed/ran.txt"}} for i in range(50)]
    count = {"tool": "execute_bash", "args": {"command": "wc -l < /testbed/ran.txt"}}
    srv = scripted({"turns": [{"tool_calls": calls}, count, {"tool": "submit"}]})
    result = run_async(arun("many", model="m", base_url=srv.url, output_dir=tmp_path / "a", image=docker_image))
    t = result.trajectory
    assert t.exit_reason == "submitted", t.exit_detail
    first = t.steps[0].tool_calls
    assert len(first) == 50 and not any(c.error for c in first[:16])
    assert all(c.error and c.output.startswith("Not run: this reply made 50 tool calls and at most 16 run")
               for c in first[16:])
    assert t.steps[1].tool_calls[0].output.startswith("16\n")  # the sandbox saw 16 commands, not 50
    sent = srv.requests[1]["messages"]
    ids = [c["id"] for c in sent[2]["tool_calls"]]
    assert [m["tool_call_id"] for m in sent[3:53]] == ids and all(m["role"] == "tool" for m in sent[3:53])
    assert "at most 16 run per reply" in sent[52]["content"]

    srv = scripted({"turns": [{"tool_calls": calls[:5]}, {"tool": "submit"}]})
    result = run_async(arun("few", model="m", base_url=srv.url, output_dir=tmp_path / "b", image=docker_image,
                            max_tool_calls_per_reply=2))
    assert [c.error for c in result.trajectory.steps[0].tool_calls] == [False, False, True, True, True]


def test_a_time_limit_says_whether_the_models_commands_or_the_model_server_spent_it(scripted, run_async, tmp_path,
                                                                                   docker_image):
    """A time limit spent in the model's own commands (`sleep 100000` every turn) is the model's
    (exit_cause "commands"); one spent waiting on a slow model server is not ("infrastructure")."""
    srv = scripted({"turns": [bash("sleep 100000")] * 50})
    result = run_async(arun("stall", model="m", base_url=srv.url, output_dir=tmp_path / "a", image=docker_image,
                            time_limit=8, timeout_per_command=2.5, stuck_after=None))
    t = Trajectory.load(tmp_path / "a" / "trajectory.json")
    assert result.exit_reason == "time_limit" and t.exit_cause == "commands", t.exit_detail
    assert "in the model's commands" in t.exit_detail and all(s.tool_calls[0].timed_out for s in t.steps)

    slow = scripted({"latency": 1.5, "turns": [bash("true")] * 50})
    result = run_async(arun("slow", model="m", base_url=slow.url, output_dir=tmp_path / "b", image=docker_image,
                            time_limit=5, stuck_after=None))
    t = Trajectory.load(tmp_path / "b" / "trajectory.json")
    assert result.exit_reason == "time_limit" and t.exit_cause == "infrastructure", t.exit_detail


def bash(command: str) -> dict:
    return {"tool": "execute_bash", "args": {"command": command}}
