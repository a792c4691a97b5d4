"""SandboxEnv on its own, as an RL trainer drives it: episodes, resets, limits, clean-up."""
from __future__ import annotations

import asyncio

import pytest

from insandbox.agent.env import EnvConfig, SandboxEnv, Task
from insandbox.core.episode import ExitReason
from insandbox.tools import ToolCall
from tests.helpers import containers_with_label


def _bash(call_id: str, command: str) -> ToolCall:
    import json
    return ToolCall(call_id, "execute_bash", json.dumps({"command": command}))


def _edit(call_id: str, **args) -> ToolCall:
    import json
    return ToolCall(call_id, "str_replace_editor", json.dumps(args))


def test_environment_api_without_the_loop(run_async, docker_image):
    """What an RL trainer does: reset, step with its own tool calls, read the answer, close."""
    async def body():
        env = SandboxEnv(EnvConfig(image=docker_image, max_steps=3))
        messages = await env.reset(Task("Write 5 to the answer file.", input_files={"in.txt": "5"}))
        assert [m["role"] for m in messages] == ["system", "user"]
        assert [s["function"]["name"] for s in env.tool_schemas] == ["execute_bash", "str_replace_editor", "submit"]
        copy = '{"command": "cp /testbed/input/in.txt /testbed/answer.txt"}'
        r = await env.step([ToolCall("a", "execute_bash", copy)])
        assert not r.done and r.messages[0]["tool_call_id"] == "a" and env.steps_left == 2
        r = await env.step([])
        assert r.nudged and r.messages[0]["role"] == "user"
        r = await env.step([ToolCall("b", "submit", "{}")])
        assert r.done and r.submitted
        assert await env.read_answer() == "5"
        await env.close()
    run_async(body())


def test_reset_starts_a_fresh_episode_every_time(run_async, docker_image):
    """Regression: a second reset() failed with "Conflict. The container name ... is already in use",
    and close(), reset(), close() left an exited container behind."""
    run_id = "env-reset-test"

    async def body():
        env = SandboxEnv(EnvConfig(image=docker_image, max_steps=3, run_id=run_id))
        try:
            await episodes(env)
        finally:
            await env.close()

    async def episodes(env):
        seen = []
        for episode in range(3):
            messages = await env.reset(Task(f"episode {episode}", input_files={"n.txt": str(episode)}))
            assert f"episode {episode}\n" in messages[-1]["content"] and not env.done
            assert env.steps_left == 3 and not env.submitted
            seen.append(env.sandbox.info()["container_id"])
            r = await env.step([_bash("a", "cat /testbed/input/n.txt; ls /testbed; echo $LEFTOVER"),
                                _edit("b", command="create", path="/testbed/notes.txt", file_text="mine\n")])
            out = r.observations[0].output.text
            assert out.startswith(str(episode)) and "notes.txt" not in out and "set-before" not in out
            # the editor's undo history is the episode's own: nothing from the last one to undo
            r = await env.step([_edit("c", command="undo_edit", path="/testbed/notes.txt"),
                                _edit("d", command="undo_edit", path="/testbed/notes.txt"),
                                _bash("e", "export LEFTOVER=set-before")])
            assert not r.observations[0].output.error and r.observations[1].output.error
            r = await env.step([ToolCall("f", "submit", "{}")])
            assert r.done and r.submitted and r.exit_reason is ExitReason.SUBMITTED
            with pytest.raises(RuntimeError, match="episode is over"):
                await env.step([ToolCall("g", "submit", "{}")])
        assert len(set(seen)) == 3
        assert len(containers_with_label(f"insandbox.run_id={run_id}")) == 1  # only the current one
        await env.close()
        assert containers_with_label(f"insandbox.run_id={run_id}") == []
        # close, reset, close: nothing left behind either
        await env.reset(Task("again"))
        await env.close()
        await env.close()  # twice is fine
        assert containers_with_label(f"insandbox.run_id={run_id}") == []
    run_async(body())


def test_async_with_removes_every_sandbox_even_when_the_body_fails(run_async, docker_image):
    run_id = "env-with-test"

    async def body():
        async with SandboxEnv(EnvConfig(image=docker_image, run_id=run_id)) as env:
            await env.reset(Task("one"))
            await env.reset(Task("two"))
            raise ValueError("the trainer failed")

    with pytest.raises(ValueError):
        run_async(body())
    assert containers_with_label(f"insandbox.run_id={run_id}") == []


def test_step_needs_a_started_episode(run_async):
    async def body():
        env = SandboxEnv(EnvConfig())
        with pytest.raises(RuntimeError, match="reset"):
            await env.step([ToolCall("a", "submit", "{}")])
    run_async(body())


def test_limits_end_the_episode_with_their_reason(run_async, docker_image):
    """The env applies every limit (steps, token budget, stuck) and says why it stopped."""
    async def body():
        async with SandboxEnv(EnvConfig(image=docker_image, max_steps=50, token_budget=1000, stuck_after=3)) as env:
            await env.reset(Task("t"))
            for _ in range(2):
                r = await env.step([_bash("a", "echo same")], tokens=10)
                assert not r.done and r.messages[0]["content"].endswith("steps left]")
            r = await env.step([_bash("a", "echo same")], tokens=10)
            assert r.done and r.exit_reason is ExitReason.STUCK and "3 times" in r.exit_detail
            assert "steps left" not in r.messages[0]["content"]  # no note once the episode is over

            await env.reset(Task("t"))
            r = await env.step([_bash("a", "echo 1")], tokens=600)
            r = await env.step([_bash("a", "echo 2")], tokens=600)
            assert r.done and r.exit_reason is ExitReason.TOKEN_BUDGET

            await env.reset(Task("t"))
            r = await env.step([], parse_errors=["a <tool_call> block is not valid JSON"])
            assert r.nudged and r.nudge_reason.startswith("your tool call could not be read")
            assert "not valid JSON" in r.messages[0]["content"]
    run_async(body())


def test_a_reset_while_the_model_thinks(run_async, docker_image):
    """reset() sets up the episode at once; its awaitable starts the sandbox, so the first model
    request can overlap it (what the loop does)."""
    async def body():
        async with SandboxEnv(EnvConfig(image=docker_image, max_steps=7)) as env:
            starting = asyncio.ensure_future(env.reset(Task("t")))
            assert env.episode is not None and env.steps_left == 7 and not env.done
            await starting
            r = await env.step([_bash("a", "true")])
            assert r.observations[0].output.exit_code == 0
    run_async(body())


def test_fork_gives_independent_envs_that_go_on_from_the_episode(run_async, docker_image):
    """RL groups sharing a prefix: fork an episode, each branch continues on its own."""
    async def body():
        async with SandboxEnv(EnvConfig(image=docker_image, max_steps=10)) as env:
            await env.reset(Task("x"))
            await env.step([_bash("a", "cd /tmp && export K=v && f() { echo fn; }"),
                            _edit("b", command="create", path="/tmp/e.txt", file_text="one\n")])
            await env.step([_edit("c", command="str_replace", path="/tmp/e.txt", old_str="one", new_str="two")])
            branches = await env.fork(2)
            snap = branches[0]._snapshot
            try:
                for i, b in enumerate(branches):
                    assert b.steps_left == 8 and b.episode is not env.episode
                    r = await b.step([_bash("d", f"echo $PWD $K $(f) $(cat e.txt) > mine-{i}; ls mine-*")])
                    assert r.observations[0].output.text.split()[:1] == [f"mine-{i}"]
                    r = await b.step([_edit("e", command="undo_edit", path="/tmp/e.txt")])  # history was copied
                    assert not r.observations[0].output.error
                    assert (await b.sandbox.read_file(f"/tmp/mine-{i}")).decode() == "/tmp v fn two\n"
                    assert (await b.sandbox.read_file("/tmp/e.txt")).decode() == "one\n"
                assert env.steps_left == 8  # the parent went on counting by itself
                assert (await env.step([_bash("f", "ls mine-* 2>/dev/null | wc -l; cat e.txt")])
                        ).observations[0].output.text.split()[:2] == ["0", "two"]
            finally:
                await branches[0].close()
                assert not snap.removed  # the other branch still uses the image
                await branches[1].close()
            assert snap.removed
    run_async(body())


@pytest.mark.parametrize("tool_format", ["native", "text"])
def test_the_hint_after_replies_without_a_call_fits_the_tool_format(tool_format, scripted, docker_image, tmp_path):
    """Regression: with --tool-format text the hint still said "try --tool-format text". Each format's hint
    is in the trajectory and on the console."""
    from insandbox.core.trajectory import Trajectory
    from tests.helpers import cli

    srv = scripted({"turns": [{"content": "I would run ls."}] * 3})
    r = cli("run", "Do it.", "--base-url", srv.url, "--model", "m", "--image", docker_image, "--max-steps", "3",
            "--tool-format", tool_format, "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr[-2000:]
    hints = [n for s in Trajectory.load(tmp_path / "run" / "trajectory.json").steps for n in s.notes
             if n.startswith("hint:")]
    assert len(hints) == 1 and " ".join(hints[0].split()) in " ".join(r.stdout.split())  # shown as recorded
    if tool_format == "text":
        assert "try --tool-format text" not in hints[0] and "no such block was found" in hints[0]
        assert '<tool_call>{"name": "execute_bash", "arguments": {"command": "ls"}}</tool_call>' in hints[0]
        assert "try --tool-format native" in hints[0]
    else:
        assert "try --tool-format text" in hints[0] and "--jinja" in hints[0]
