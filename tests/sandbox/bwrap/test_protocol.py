"""The bwrap backend's own ways on real sandboxes (started by this process, no Docker engine): files
while the server is busy or after it died (from the host side), whole tasks, the command line and RL
with --backend bwrap, what it declares and cannot do (refused in one line or done another way), and
`clean`. What every backend does is tests/sandbox/conformance/'s."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from insandbox.sandbox import SandboxError, SandboxLimits, SandboxSpec, SetupError, backend_class
from insandbox.sandbox.bwrap import LIVE, BwrapSandbox
from insandbox.sandbox.pool import SandboxPool
from tests.helpers import cli


def test_what_the_backend_declares():
    caps = backend_class("bwrap").capabilities
    assert (caps.recycle, caps.snapshot, caps.disk_limit, caps.named_networks) == (False, False, False, False)
    assert caps.network_modes == ("none", "bridge", "host")
    assert caps.limits == ("memory", "pids") and not caps.runtimes  # cpus: where it has a cgroup


def test_a_spec_it_cannot_meet_is_refused_in_its_own_words_when_the_sandbox_is_made():
    for limits, words in ((SandboxLimits(network="registries"), "^the bwrap backend cannot --network registries "
                                                                "\\(its allow-list proxy"),
                          (SandboxLimits(network="none", runtime="runsc"), "^the bwrap backend has no OCI runtimes"),
                          (SandboxLimits(network="none", disk="1g", cpus=1.0), None)):
        if words is None:  # a disk limit held per file (prepare warns), cpus where it has a cgroup: made
            assert BwrapSandbox(SandboxSpec(limits=limits)).uses == 0
            continue
        with pytest.raises(SetupError, match=words):
            BwrapSandbox(SandboxSpec(limits=limits))


def test_files_come_back_while_a_command_runs_and_after_the_server_died(bwrap_factory, run_async, tmp_path):
    """A caller that gave up on a long command still reads the answer and copies the outputs at once
    (on the host side: the server is busy), and so does one whose sandbox's server is gone."""
    async def body():
        sb = await bwrap_factory()
        await sb.write_file("/testbed/answer.txt", b"42\n")
        await sb.run("mkdir -p /testbed/output && echo r > /testbed/output/r.txt && mkfifo /testbed/output/p && "
                     "ln -s /etc/shadow /testbed/output/s")
        task = asyncio.ensure_future(sb.run("sleep 60", timeout=120))
        await asyncio.sleep(0.3)
        task.cancel()
        t0 = time.monotonic()
        assert await sb.read_file("/testbed/answer.txt") == b"42\n"
        busy = await sb.copy_out("/testbed/output", tmp_path / "busy")
        assert time.monotonic() - t0 < 5 and busy.files == ["r.txt"]
        assert {s.path for s in busy.skipped} == {"p", "s"}
        await sb.channel.close()  # as if the server had died: stdin closed, it ends the sandbox
        await asyncio.wait_for(sb.proc.wait(), 10)
        assert not sb.alive
        dead = await sb.copy_out("/testbed/output", tmp_path / "dead")
        assert dead.files == ["r.txt"] and (tmp_path / "dead/r.txt").read_text() == "r\n"
        assert await sb.read_file("/testbed/answer.txt") == b"42\n"
        with pytest.raises(SandboxError):
            await sb.run("echo hi")
        await sb.close()
    run_async(body())


def test_a_whole_task_runs_without_docker(no_engine, scripted, run_async, tmp_path):
    from insandbox import arun

    srv = scripted({"turns": [
        {"tool": "execute_bash", "args": {"command": "echo 42 > answer.txt && mkdir -p output && "
                                                    "echo made > output/report.txt && ln -s /etc/passwd output/l && "
                                                    "cat answer.txt"}},
        {"tool": "str_replace_editor", "args": {"command": "create", "path": "/testbed/output/notes.md",
                                                 "file_text": "# notes\n\ttabbed\r\n"}},
        {"tool": "submit"}]})
    result = run_async(arun("What is 6 x 7?", model="scripted", base_url=srv.url, output_dir=tmp_path / "run",
                            backend="bwrap", network="none", max_steps=5))
    t = result.trajectory
    assert t.exit_reason == "submitted" and result.answer == "42\n", (t.exit_reason, t.exit_detail)
    assert sorted(result.files) == ["notes.md", "report.txt"]
    assert (tmp_path / "run/files/notes.md").read_bytes() == b"# notes\n\ttabbed\r\n"
    assert t.sandbox["backend"] == "bwrap" and t.sandbox["server_info"]["pid"] == 1
    assert not LIVE


def test_the_command_line_takes_backend_bwrap(no_engine, scripted, tmp_path):
    """`insandbox run --backend bwrap` with no engine reachable: the run folder records the backend."""
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": "echo 7 > /testbed/answer.txt"}},
                              {"tool": "submit"}]})
    r = cli("run", "7?", "--backend", "bwrap", "--network", "none", "--model", "m", "--base-url", srv.url,
            "--out", str(tmp_path / "run"), "--max-steps", "3", "-q")
    assert r.returncode == 0, r.stderr
    traj = json.loads((tmp_path / "run/trajectory.json").read_text())
    assert traj["exit_reason"] == "submitted" and traj["sandbox"]["backend"] == "bwrap"
    assert (tmp_path / "run/answer.txt").read_text() == "7\n"
    # no engine here: a replay in a Docker sandbox would fail
    r = cli("replay", str(tmp_path / "run"), "--backend", "bwrap", "--network", "none", "-q")
    assert r.returncode == 0 and "2 identical, 0 differ" in r.stdout, (r.stdout, r.stderr)
    r = cli("run", "7?", "--backend", "nope", "--model", "m", "--base-url", srv.url, "-q")
    assert r.returncode != 0 and r.stderr.strip().splitlines() == [
        "insandbox: unknown sandbox backend 'nope'; known: docker, bwrap"]


def test_rl_rollout_command_takes_backend_bwrap(no_engine, tmp_path):
    """`insandbox rl rollout --backend bwrap` with the embedded policy and no engine reachable."""
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "t1", "problem_statement": "Answer B.", "ground_truth": "B",
                                "input_files": {"doc.txt": "B\n"}}) + "\n")
    out = tmp_path / "out"
    r = cli("rl", "rollout", "--data", str(data), "--out", str(out), "--repeats", "1", "--max-steps", "1",
            "--max-tokens", "16", "--backend", "bwrap", "--network", "none", "--seed", "1", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    record = json.loads((out / "rollouts.jsonl").read_text().splitlines()[0])
    sandbox = record["trajectory"]["sandbox"]
    assert sandbox.get("backend") == "bwrap", (record["exit_reason"], record["exit_detail"], sandbox)


def test_what_it_cannot_do_is_refused_in_one_line_or_done_another_way(no_engine, run_async):
    from insandbox.agent.env import EnvConfig, SandboxEnv, Task

    async def body():
        for net, words in (("registries", "cannot --network registries"), ("my-net", "cannot --network my-net")):
            spec = SandboxSpec(limits=SandboxLimits(network=net))
            with pytest.raises(SetupError, match=words) as e:
                await BwrapSandbox.prepare(spec)
            assert "\n" not in str(e.value)
            with pytest.raises(SetupError, match=words):
                await BwrapSandbox(spec).start()
        with pytest.raises(SetupError, match="no OCI runtimes"):
            await BwrapSandbox.prepare(SandboxSpec(limits=SandboxLimits(network="none", runtime="runsc")))
        env = SandboxEnv(EnvConfig(backend="bwrap", limits=SandboxLimits(network="none")))
        await env.reset(Task(prompt="x"))
        try:
            with pytest.raises(SetupError, match="^the bwrap backend cannot snapshot a sandbox"):
                await env.fork(2)
        finally:
            await env.close()
        async with SandboxPool(SandboxSpec(limits=SandboxLimits(network="none")), backend="bwrap", size=1) as pool:
            first = await pool.acquire()
            pool.release(first)
            await asyncio.sleep(0)
            second = await pool.acquire()
            pool.release(second)
        return first, second, pool.stats

    first, second, stats = run_async(body())
    assert second is not first and stats.recycled == 0 and stats.started >= 2  # no recycling: fresh ones
    assert stats.removed == stats.started and not LIVE


def test_prepare_warns_once_that_the_disk_is_not_capped_in_all(no_engine, run_async):
    from insandbox.sandbox.bwrap import backend

    said = []
    backend._WARNED.discard("disk")
    run_async(BwrapSandbox.prepare(SandboxSpec(limits=SandboxLimits(network="none")), said.append))
    run_async(BwrapSandbox.prepare(SandboxSpec(limits=SandboxLimits(network="none")), said.append))
    warnings = [s for s in said if s.startswith("warning: sandboxes get no disk limit")]
    assert len(warnings) == 1 and "each file is capped at 10g" in warnings[0]


def test_rl_rollouts_run_in_bwrap_sandboxes_from_a_pool(no_engine, run_async):
    """RL's rollouts take their sandboxes from the caller's pool: a bwrap pool gives them fresh sandboxes."""
    from insandbox.models.local_server import default_gguf
    from insandbox.rl.rewards import RewardResult
    from insandbox.rl.rollout import RolloutConfig, Rollouts, check_record
    from insandbox.rl.rollout.backends import load_gguf_tokenizer
    from insandbox.rl.rollout.backends.scripted import ScriptedGenerator

    async def exact(row, outcome, config):
        ok = float((outcome.answer or "").strip() == row["ground_truth"])
        return RewardResult(value=ok, correct=ok, detail={})

    def call(name: str, **args) -> str:
        import json
        return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'

    r = Rollouts(load_gguf_tokenizer(default_gguf()), RolloutConfig(network="none", max_steps=4), reward_fn=exact)
    row = {"id": "t", "problem_statement": "A or B?", "ground_truth": "B", "input_files": {"doc.txt": "B.\n"}}
    gen = ScriptedGenerator(r.chat, [{"turns": [call("execute_bash", command="cat /testbed/documents/doc.txt | "
                                                                             "tr -d . > /testbed/answer.txt"),
                                                call("submit")]}])

    async def body():
        async with SandboxPool(r.env_template.sandbox_spec(), backend="bwrap", size=3) as pool:
            r.pool = pool
            records = await r.run_groups([row], gen, n=3, concurrency=3)
        return records, pool.stats

    records, stats = run_async(body())
    assert [x.reward for x in records] == [1.0, 1.0, 1.0], [x.error for x in records]
    assert all(check_record(x, r.chat) == [] for x in records)
    assert all(x.trajectory["sandbox"]["backend"] == "bwrap" for x in records)
    assert stats.recycled == 0 and not LIVE


def test_clean_all_stops_a_live_sandbox_and_removes_its_folder(bwrap_factory, run_async):
    async def body():
        sb = await bwrap_factory()
        mine = {x.id: x for x in BwrapSandbox.clean(everything=True, dry_run=True)}
        assert mine[sb.name].status == "running" and mine[sb.name].run_id == "test" and sb.folder.path.exists()
        assert sb.name not in {x.id for x in BwrapSandbox.clean()}  # its owner (this process) is alive
        assert sb.name in {x.id for x in BwrapSandbox.clean(everything=True)}
        await asyncio.wait_for(sb.proc.wait(), 10)
        assert not sb.folder.path.exists()
        with pytest.raises(SandboxError):
            await sb.run("echo hi")
        await sb.close()
    run_async(body())
