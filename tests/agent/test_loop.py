"""The whole loop: scripted model over HTTP, real container, run folder on disk."""
from __future__ import annotations

import pytest

from insandbox import ConfigError, RunConfig, Trajectory, arun
from insandbox.models.pricing import load_prices
from insandbox.runs.session import price_of
from tests.helpers import containers_with_label, owner_of


def _no_containers_left(traj: Trajectory) -> bool:
    return containers_with_label(f"insandbox.run_id={traj.run_id}") == []


def bash(cmd, **kw):
    return {"tool": "execute_bash", "args": {"command": cmd}, **kw}


def test_full_run(scripted, run_async, tmp_path, docker_image):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "numbers.txt").write_text("3\n4\n")
    srv = scripted({"turns": [
        bash("cat /testbed/input/numbers.txt", content="First, the input."),
        {"tool_calls": [{"name": "execute_bash", "arguments": {"command": "cd /testbed/output && mkdir -p a/b"}},
                        {"name": "str_replace_editor",
                         "arguments": {"command": "create", "path": "/testbed/output/a/b/sum.py",
                                       "file_text": "print(3 + 4)\n"}},
                        {"name": "execute_bash", "arguments": {"command": "python3 a/b/sum.py > result.txt; pwd"}}]},
        {"content": "I think I am nearly done."},
        {"tool": "execute_bash", "args": '{"command": "echo broken'},
        {"tool": "run_python", "args": {"code": "1"}},
        bash("echo 7 > /testbed/answer.txt"),
        {"tool": "submit"},
    ]})
    out = tmp_path / "run"
    result = run_async(arun("Add the numbers in the input file.", model="scripted", base_url=srv.url,
                            api_key="sk-very-secret", input_dir=inputs, output_dir=out, image=docker_image,
                            max_steps=20))
    t = result.trajectory
    assert t.exit_reason == "submitted" and t.submitted and result.answer == "7\n"
    assert (out / "answer.txt").read_text() == "7\n"
    assert sorted(result.files) == ["a/b/sum.py", "result.txt"]
    assert (out / "files/result.txt").read_text() == "7\n"
    assert (out / "files/a/b/sum.py").read_text() == "print(3 + 4)\n"
    assert _no_containers_left(t)

    saved = Trajectory.load(out / "trajectory.json")
    assert saved.schema_version == 3 and saved.exit_reason == "submitted" and len(saved.steps) == 7
    assert saved.price.match == "local" and saved.totals.cost_usd == 0.0  # a server on this machine
    s1, s2, s3, s4, s5 = saved.steps[:5]
    assert s1.tool_calls[0].output.startswith("3\n4\n") and s1.tool_calls[0].exit_code == 0
    assert s1.content == "First, the input." and s1.prompt_tokens > 0 and s1.completion_tokens > 0
    assert [c.name for c in s2.tool_calls] == ["execute_bash", "str_replace_editor", "execute_bash"]
    assert "/testbed/output" in s2.tool_calls[2].output  # cd persisted within the reply
    assert s3.nudged and not s3.tool_calls
    assert s4.tool_calls[0].error and "not valid JSON" in s4.tool_calls[0].output
    assert s5.tool_calls[0].error and "no tool named 'run_python'" in s5.tool_calls[0].output
    assert saved.totals.steps == 7 and saved.totals.tool_calls == 8
    assert saved.totals.prompt_tokens == sum(s.prompt_tokens for s in saved.steps)
    assert all(s.model_latency_s > 0 for s in saved.steps) and saved.totals.tool_time_s > 0
    assert saved.sandbox["image"] == docker_image and saved.sandbox["timings"]["start_s"] > 0
    assert "sk-very-secret" not in (out / "trajectory.json").read_text() and saved.config["api_key_set"]

    # what the server received is a valid conversation: every tool call id answered once, in order
    last = srv.requests[-1]["messages"]
    for i, m in enumerate(last):
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            answered = [x["tool_call_id"] for x in last[i + 1:i + 1 + len(ids)]]
            assert answered == ids
    nudges = [m for m in last if m["role"] == "user"][1:]
    assert len(nudges) == 1 and "no tool call" in nudges[0]["content"]
    assert last[3]["role"] == "tool" and last[3]["content"].endswith("[19 steps left]")


def test_max_steps_with_last_step_warning(scripted, run_async, tmp_path, docker_image):
    srv = scripted({"turns": [bash("echo 1"), bash("echo 2"), bash("echo 3"), bash("echo 4")]})
    result = run_async(arun("loop", model="m", base_url=srv.url, max_steps=3, output_dir=tmp_path,
                            image=docker_image))
    t = result.trajectory
    assert t.exit_reason == "max_steps" and len(t.steps) == 3 and len(srv.requests) == 3
    assert "1 step left" in srv.requests[2]["messages"][-1]["content"]
    assert _no_containers_left(t)


def test_token_budget_and_time_limit(scripted, run_async, tmp_path, docker_image):
    srv = scripted({"turns": [bash("echo a", usage={"prompt_tokens": 600, "completion_tokens": 10})] * 5})
    result = run_async(arun("budget", model="m", base_url=srv.url, token_budget=1000, output_dir=tmp_path / "b",
                            image=docker_image))
    assert result.exit_reason == "token_budget" and len(result.trajectory.steps) == 2
    slow = scripted({"latency": 0.4, "turns": [bash("echo slow")] * 50})
    result = run_async(arun("time", model="m", base_url=slow.url, time_limit=1.5, output_dir=tmp_path / "t",
                            image=docker_image))
    t = result.trajectory
    assert t.exit_reason == "time_limit" and 1 <= len(t.steps) <= 4 and _no_containers_left(t)
    assert Trajectory.load(tmp_path / "t/trajectory.json").exit_reason == "time_limit"


def test_model_failure_ends_cleanly(scripted, run_async, tmp_path, docker_image):
    srv = scripted({"turns": [bash("echo fine"), {"tool": "submit", "fail": {"status": 500, "times": 99}}]})
    result = run_async(arun("fail", model="m", base_url=srv.url, max_retries=0, output_dir=tmp_path,
                            image=docker_image))
    t = result.trajectory
    assert t.exit_reason == "model_error" and "500" in t.exit_detail and len(t.steps) == 1
    assert _no_containers_left(t)
    small = scripted({"context_window": 300, "turns": [bash("echo fits")] * 5})
    result = run_async(arun("overflow", model="m", base_url=small.url, output_dir=tmp_path / "c",
                            image=docker_image))
    assert result.exit_reason == "context_length"


def test_calls_after_submit_are_not_run(scripted, run_async, tmp_path, docker_image):
    srv = scripted({"turns": [{"tool_calls": [
        {"name": "execute_bash", "arguments": {"command": "echo 1 > /testbed/answer.txt"}},
        {"name": "submit", "arguments": {}},
        {"name": "execute_bash", "arguments": {"command": "echo 2 > /testbed/answer.txt"}}]}]})
    result = run_async(arun("s", model="m", base_url=srv.url, output_dir=tmp_path, image=docker_image))
    calls = result.trajectory.steps[0].tool_calls
    assert result.answer == "1\n" and calls[2].error and "Not run" in calls[2].output
    assert result.trajectory.messages[-1]["tool_call_id"] == calls[2].id


def test_llm_mode_is_one_plain_completion(scripted, run_async, tmp_path):
    srv = scripted({"turns": [{"content": "The answer is 42."}]})
    result = run_async(arun("What is 6*7?", model="m", base_url=srv.url, mode="llm", output_dir=tmp_path,
                            input_files={"notes.txt": "a hint"}))
    assert result.exit_reason == "completed" and result.answer == "The answer is 42."
    req = srv.requests[0]
    assert req["tools"] is None and len(srv.requests) == 1
    assert 'What is 6*7?\n\n<document name="notes.txt">\na hint\n</document>' in req["messages"][-1]["content"]
    assert (tmp_path / "answer.txt").read_text() == "The answer is 42."


@pytest.fixture
def no_user_prices(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("INSANDBOX_PRICES", raising=False)


def test_a_run_records_what_its_model_calls_cost(scripted, run_async, tmp_path, no_user_prices):
    prices = tmp_path / "prices.yaml"
    prices.write_text("prices:\n  scripted-model: {input: 2, cache_read: 0.5, output: 10}\n")
    srv = scripted({"turns": [{"content": "42", "usage": {"prompt_tokens": 1000, "completion_tokens": 50,
                                                          "prompt_tokens_details": {"cached_tokens": 400}}}]})
    result = run_async(arun("q", model="scripted-model-v2", base_url=srv.url, mode="llm", prices=prices,
                            output_dir=tmp_path / "run"))
    saved = Trajectory.load(tmp_path / "run" / "trajectory.json")
    cost = (600 * 2 + 400 * 0.5 + 50 * 10) / 1e6
    assert saved.steps[0].cached_tokens == 400 and saved.steps[0].cost_usd == pytest.approx(cost)
    assert saved.totals.cost_usd == pytest.approx(cost) == result.trajectory.totals.cost_usd
    assert (saved.price.entry, saved.price.match, saved.price.source) == ("scripted-model", "prefix", str(prices))
    # the same server and no price of the user's: a model served on this machine costs nothing
    free = run_async(arun("q", model="gpt-4o", base_url=srv.url, mode="llm", output_dir=tmp_path / "free"))
    assert free.trajectory.price.match == "local" and free.trajectory.totals.cost_usd == 0.0


def test_a_model_elsewhere_without_a_price_costs_unknown(no_user_prices):
    table, remote = load_prices(), RunConfig(model="m", base_url="https://api.example.com/v1")
    assert price_of(table, remote, "m").match == "unknown" and price_of(table, remote, "m").cost(1, 1) is None
    assert price_of(table, remote, "gpt-4o").input == 2.5
    assert price_of(table, RunConfig(), "SmolLM2-135M-Instruct").match == "local"  # the embedded model
    assert price_of(table, RunConfig(base_url="http://localhost:8000/v1"), "gpt-4o").match == "local"


def test_a_bad_price_file_stops_the_run_before_anything_is_created(scripted, run_async, tmp_path, no_user_prices):
    srv = scripted({"turns": [{"content": "42"}]})
    bad = tmp_path / "prices.yaml"
    bad.write_text("prices:\n  m: {input: 1}\n")
    with pytest.raises(ConfigError, match="prices.m.output: Field required"):
        run_async(arun("q", model="m", base_url=srv.url, mode="llm", prices=bad, output_dir=tmp_path / "run"))
    assert not (tmp_path / "run").exists() and srv.requests == []


def test_container_dying_mid_run_loses_nothing(scripted, run_async, tmp_path, docker_image):
    """The engine kills the container between two steps: the run ends with sandbox_error, and
    what the model had written (output files, answer) is still copied from the stopped container."""
    import subprocess
    import threading

    srv = scripted({"turns": [bash("echo partial > /testbed/output/part.txt && echo 1 > /testbed/answer.txt"),
                              bash("echo never", latency=2.0)]})

    def kill_when_asked():
        import time
        while len(srv.requests) < 2:  # the second request: the first command has run (part.txt exists)
            time.sleep(0.05)
        import os
        ids = containers_with_label(owner_of(os.getpid()))  # ours only
        for cid in ids:
            subprocess.run(["docker", "kill", cid], capture_output=True)
    threading.Thread(target=kill_when_asked, daemon=True).start()
    result = run_async(arun("die", model="m", base_url=srv.url, output_dir=tmp_path, image=docker_image))
    t = result.trajectory
    assert t.exit_reason == "sandbox_error" and "gone" in t.exit_detail, t.exit_detail
    assert result.files == ["part.txt"] and (tmp_path / "files/part.txt").read_text() == "partial\n"
    assert result.answer == "1\n" and _no_containers_left(t)


MEMORY_BOMB = "python3 -c 'a = [bytearray(1 << 20) for _ in range(100000)]'"


def test_an_out_of_memory_kill_is_told_to_the_model_and_the_run_goes_on(scripted, run_async, tmp_path,
                                                                         docker_image):
    srv = scripted({"turns": [bash(MEMORY_BOMB), bash("echo 1 > /testbed/answer.txt"), {"tool": "submit"}]})
    result = run_async(arun("bomb", model="m", base_url=srv.url, output_dir=tmp_path, image=docker_image,
                            memory="256m"))
    seen = srv.requests[1]["messages"][-1]["content"]
    assert "killed: out of memory" in seen and "[exit code: 137]" in seen, seen
    assert result.exit_reason == "submitted" and result.answer == "1\n"


def test_a_sandbox_killed_for_memory_ends_the_run_as_sandbox_error_with_its_outputs(scripted, run_async, tmp_path,
                                                                                    docker_image):
    """The model makes the sandbox's own server the OOM killer's first choice: the container dies with
    it; the run says why and still copies what was written."""
    many_small = ("for i in $(seq 40); do python3 -c 'import time; a = b\"x\" * (12 << 20); time.sleep(60)' & "
                  "done; wait")  # each one scores below the server, which goes first
    srv = scripted({"turns": [bash("echo kept > /testbed/output/part.txt; echo 1000 > /proc/1/oom_score_adj; "
                                   + many_small), {"tool": "submit"}]})
    result = run_async(arun("bomb", model="m", base_url=srv.url, output_dir=tmp_path, image=docker_image,
                            memory="256m"))
    t = result.trajectory
    assert t.exit_reason == "sandbox_error" and "memory limit" in t.exit_detail, t.exit_detail
    assert t.exit_cause == "sandbox"  # the model's doing, not the infrastructure's (RL rewards read it)
    assert result.files == ["part.txt"] and (tmp_path / "files/part.txt").read_text() == "kept\n"
    assert _no_containers_left(t)


def test_abusive_calls_are_tool_errors_and_the_run_goes_on(scripted, run_async, tmp_path, docker_image):
    """Regressions: a FIFO viewed with the editor blocked the server 30 s and ended the run as
    sandbox_error; a lone surrogate in the arguments ended it with 0 steps; a FIFO answer.txt stalled
    collection; a dangling answer.txt symlink meant no answer and no files; a 2 GB sparse file
    meant no files at all. Every one is now an error the model reads, or a recorded skip."""
    srv = scripted({"turns": [
        bash("mkfifo /testbed/answer.txt /testbed/output/pipe && ln -s /nope /testbed/output/answer.txt && "
             "echo kept > /testbed/output/normal.txt && truncate -s 2G /testbed/output/sparse.bin"),
        {"tool": "str_replace_editor", "args": {"command": "view", "path": "/testbed/answer.txt"}},
        {"tool": "execute_bash", "args": '{"command": "echo \\ud800"}'},
        {"tool": "str_replace_editor", "args": '{"command": "create", "path": "/testbed/x\\udcff", "file_text": "y"}'},
        {"tool": "str_replace_editor", "args": {"command": "view", "path": "/dev/urandom"}},
        bash("echo still here"),
        {"tool": "submit"},
    ]})
    result = run_async(arun("abuse", model="m", base_url=srv.url, output_dir=tmp_path, image=docker_image,
                            output_max_file_bytes=1 << 30))
    t = result.trajectory
    assert t.exit_reason == "submitted" and len(t.steps) == 7, t.exit_detail
    outs = [s.tool_calls[0] for s in t.steps]
    assert outs[1].error and "is a FIFO, not a regular file" in outs[1].output
    assert outs[2].error and "U+D800" in outs[2].output and "Nothing was run" in outs[2].output
    assert outs[3].error and "U+DCFF" in outs[3].output
    assert outs[4].error and "character device" in outs[4].output
    assert outs[5].output.startswith("still here")
    assert result.answer is None and result.files == ["normal.txt"]
    assert (tmp_path / "files/normal.txt").read_text() == "kept\n"
    saved = Trajectory.load(tmp_path / "trajectory.json")  # every skip is on record, with its reason
    why = [(s.path, s.reason) for s in saved.output_skipped]
    assert ("/testbed/answer.txt", "a FIFO, not a regular file: not read as the answer") in why
    assert ("/testbed/output/answer.txt", "symbolic link to /nope, which does not exist") in why  # as the answer
    assert ("/testbed/output/answer.txt", "symbolic link to '/nope' (links are not followed)") in why  # as a file
    assert any(p == "/testbed/output/sparse.bin" and "per-file limit" in r for p, r in why)
    assert ("/testbed/output/pipe", "FIFO, not a regular file") in why and len(why) == 5
    assert _no_containers_left(t)


def test_binary_output_reaches_the_model_server_as_text(scripted, run_async, tmp_path, docker_image):
    """Regression: `head -c 5M /dev/urandom` put NUL bytes into the model's messages, which some
    servers reject. Observations now carry no control bytes, and say how many were replaced."""
    srv = scripted({"turns": [bash("head -c 5M /dev/urandom"), bash("printf 'a\\0b\\033[31mred\\033[0m\\n'"),
                              {"tool": "submit"}]})
    result = run_async(arun("binary", model="m", base_url=srv.url, output_dir=tmp_path, image=docker_image))
    assert result.trajectory.exit_reason == "submitted" and len(srv.requests) == 3
    tool_messages = [m["content"] for m in srv.requests[2]["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 2
    for text in tool_messages:
        assert not any(ord(ch) < 32 and ch not in "\t\n\r" for ch in text), repr(text[:200])
        assert "control character" in text and "replaced with \ufffd" in text
    assert tool_messages[1].startswith("a\ufffdbred\n") and "1 terminal escape sequence" not in tool_messages[1]
    assert "2 terminal escape sequences removed" in tool_messages[1]


def test_calls_written_as_text_go_back_as_written(scripted, run_async, tmp_path, docker_image):
    """Regression: calls parsed from <tool_call> text were sent back as structured tool_calls with the
    text removed, so on a server whose template ignores tool_calls the model never saw its calls."""
    srv = scripted({"turns": [bash("echo from-text", as_text=True, content="Checking."),
                              {"content": "<tool_call>{oops}</tool_call>"},
                              {"tool": "submit", "as_text": True}]})
    result = run_async(arun("text", model="m", base_url=srv.url, output_dir=tmp_path, image=docker_image))
    assert result.exit_reason == "submitted" and result.trajectory.steps[0].tool_calls_from_text
    sent = srv.requests[1]["messages"]
    assert sent[2] == {"role": "assistant", "content": srv.requests[0]["reply"]["content"]}
    assert "<tool_call>" in sent[2]["content"] and "tool_calls" not in sent[2]
    assert sent[3]["role"] == "user" and sent[3]["content"].startswith("<tool_response>\nfrom-text\n")
    nudge = srv.requests[2]["messages"][-1]
    assert nudge["role"] == "user" and "could not be read" in nudge["content"]
    assert result.trajectory.steps[1].nudge_reason.startswith("your tool call could not be read")


def test_a_failed_request_is_recorded_and_its_time_counted(scripted, run_async, tmp_path, docker_image):
    """Regression: a last request that failed after 17 s was in no step: wall 24.3 s, model 5.9 s."""
    overflow = ("This model's maximum context length is 100 tokens. However, you requested 150 tokens "
                "(140 in the messages, 10 in the completion). Please reduce the length of the messages.")
    srv = scripted({"turns": [bash("echo one"),
                              {"tool": "submit", "latency": 0.6, "fail": {"status": 400, "message": overflow,
                                                                           "times": 99}}]})
    result = run_async(arun("overflow", model="m", base_url=srv.url, output_dir=tmp_path, image=docker_image))
    t = Trajectory.load(tmp_path / "trajectory.json")
    assert t.exit_reason == "context_length" and len(t.steps) == 1 and result.exit_reason == "context_length"
    assert t.totals.failed_requests == 1 and len(t.failed_requests) == 1
    failed = t.failed_requests[0]
    assert failed.latency_s >= 0.6 and failed.exit_reason == "context_length" and "maximum context" in failed.error
    assert t.totals.model_time_s >= t.steps[0].model_latency_s + failed.latency_s - 1e-6


def test_an_answer_that_is_not_json_ends_as_model_error_with_the_record_saved(scripted, run_async, tmp_path,
                                                                              docker_image):
    """Regression: an HTTP 200 whose body is not JSON gave a raw traceback, exit_reason null, rc 1."""
    srv = scripted({"turns": [bash("echo 1 > /testbed/answer.txt"),
                              {"tool": "submit", "fail": {"status": 200, "body": "<html>oops</html>", "times": 99}}]})
    result = run_async(arun("html", model="m", base_url=srv.url, max_retries=1, output_dir=tmp_path,
                            image=docker_image))
    t = Trajectory.load(tmp_path / "trajectory.json")
    assert t.exit_reason == "model_error" and "not a chat completion" in t.exit_detail and len(t.steps) == 1
    assert t.totals.failed_requests == 1 and result.answer == "1\n" and _no_containers_left(t)


def test_a_stuck_loop_ends_the_run(scripted, run_async, tmp_path, docker_image):
    srv = scripted({"turns": [bash("ls /testbed")] * 20})
    result = run_async(arun("stuck", model="m", base_url=srv.url, stuck_after=4, output_dir=tmp_path / "a",
                            image=docker_image))
    assert result.exit_reason == "stuck" and len(result.trajectory.steps) == 4
    assert "4 times in a row" in result.trajectory.exit_detail
    result = run_async(arun("stuck", model="m", base_url=srv.url, stuck_after=None, max_steps=6,
                            output_dir=tmp_path / "b", image=docker_image))
    assert result.exit_reason == "max_steps" and len(result.trajectory.steps) == 6


def test_tool_format_text_puts_the_tools_in_the_system_prompt_and_reads_calls_from_text(scripted, run_async,
                                                                                         tmp_path, docker_image):
    srv = scripted({"turns": [bash("echo 5 > /testbed/answer.txt", as_text=True), {"tool": "submit", "as_text": True}]})
    result = run_async(arun("Write 5.", model="scripted", base_url=srv.url, output_dir=tmp_path / "run",
                            image=docker_image, tool_format="text"))
    assert result.trajectory.exit_reason == "submitted" and result.answer == "5\n"
    first, second = srv.requests
    assert first["tools"] is None and "tool_choice" not in first["params"]  # nothing structured is sent
    system = first["messages"][0]["content"]
    assert system.startswith(result.trajectory.messages[0]["content"][:40])  # the task's prompt, then the tools
    assert '"name": "execute_bash"' in system and "<tool_call>" in system
    assert second["messages"][-1]["role"] == "user" and "<tool_response>" in second["messages"][-1]["content"]


def test_replies_without_tool_calls_get_a_hint_about_the_tool_format(scripted, run_async, tmp_path, docker_image):
    srv = scripted({"turns": [{"content": "I would run ls."}] * 4})
    result = run_async(arun("Do it.", model="scripted", base_url=srv.url, output_dir=tmp_path / "run",
                            image=docker_image, max_steps=4))
    notes = [[n for n in s.notes if n.startswith("hint:")] for s in result.trajectory.steps]
    assert notes[:2] == [[], []] and "--tool-format text" in notes[2][0] and notes[3] == []


def test_an_output_folder_prepared_with_links_is_never_written_through(scripted, run_async, tmp_path, docker_image):
    """--output-dir names a folder someone else prepared: links where the run writes its files, its
    answer and its trajectory's temporary file. Nothing is written through them."""
    bait = tmp_path / "bait"
    bait.mkdir()
    for name in ("out.txt", "answer", "traj", "deep"):
        (bait / name).write_text("host file\n")
    out = tmp_path / "run"
    (out / "files" / "sub").mkdir(parents=True)
    (out / "files" / "out.txt").symlink_to(bait / "out.txt")
    (out / "files" / "linked").symlink_to(bait, target_is_directory=True)
    (out / "answer.txt").symlink_to(bait / "answer")
    (out / "trajectory.json.tmp").symlink_to(bait / "traj")
    srv = scripted({"turns": [
        bash("mkdir -p /testbed/output/linked && echo pwned > /testbed/output/out.txt && "
             "echo pwned > /testbed/output/linked/deep && echo pwned > /testbed/answer.txt"),
        {"tool": "submit"}]})
    for name in ("trajectory.json.tmp", "answer.txt"):  # the run's own files: refused before anything starts
        with pytest.raises(ConfigError, match=f"{name} there is a symbolic link"):
            run_async(arun("x", model="scripted", base_url=srv.url, output_dir=out, image=docker_image, max_steps=5))
        (out / name).unlink()
    # links inside files/ (the sandbox's outputs land there): each such output is skipped, not written through
    result = run_async(arun("x", model="scripted", base_url=srv.url, output_dir=out, image=docker_image,
                            max_steps=5))
    assert all((bait / name).read_text() == "host file\n" for name in ("out.txt", "answer", "traj", "deep"))
    skipped = {s.path for s in result.trajectory.output_skipped}
    assert {"/testbed/output/out.txt", "/testbed/output/linked/deep"} <= skipped, skipped


def test_a_reply_holding_a_lone_surrogate_goes_back_to_the_server(scripted, run_async, tmp_path, docker_image):
    """A server's reply may carry "\\ud800" (valid JSON, no character); sending the history back must not fail."""
    srv = scripted({"turns": [{"content": "thinking \ud800 aloud", "tool_calls": [
        {"name": "execute_bash", "arguments": {"command": "echo 1 > /testbed/answer.txt"}}]}, {"tool": "submit"}]})
    result = run_async(arun("x", model="m", base_url=srv.url, output_dir=tmp_path, image=docker_image, max_steps=5))
    assert result.trajectory.exit_reason == "submitted", result.trajectory.exit_detail
    assert len(srv.requests) == 2
