"""Sandboxes under gVisor (`--runtime gvisor`: the engine's runsc, registered by
`INSANDBOX_GVISOR=1 bash scripts/setup.sh`, which the test command runs): the tools (coreutils' stat
calls included, through the image's shim), every network mode, the disk limit, copy-back, the pool
(fresh sandboxes instead of recycled ones), fork and replay."""
from __future__ import annotations

import json

from insandbox import arun
from insandbox.sandbox import SandboxLimits, SandboxSpec
from insandbox.sandbox.pool import SandboxPool
from tests.helpers import cli
from tests.sandbox.test_network import PROBE, host_addresses, tcp_server

GVISOR = "gvisor"


def test_the_tools_work_under_gvisor(sandbox_factory, run_async):
    async def go():
        sb = await sandbox_factory(limits=SandboxLimits(runtime=GVISOR))
        res = await sb.run("uname -r; mkdir -p d && echo hi > d/f && ls d && stat -c %s d/f && "
                           "du -s d >/dev/null && echo du-ok; cd d && export V=1; python3 -c 'print(2 ** 10)'")
        again = await sb.run('pwd; echo "$V"')
        await sb.write_file("/testbed/bytes.bin", b"\x00\r\n\t\xff")
        return res.output, again.output, await sb.read_file("/testbed/bytes.bin"), sb.gvisor

    out, again, data, gvisor = run_async(go())
    lines = out.split()
    assert gvisor and lines[0] == "4.4.0"  # gVisor's own kernel, not the host's
    assert lines[1:4] == ["f", "3", "du-ok"] and lines[4] == "1024", out
    assert again.split() == ["/testbed/d", "1"] and data == b"\x00\r\n\t\xff"


def test_limits_under_gvisor(sandbox_factory, run_async):
    """--pids-limit counts the sandbox's processes (the host's cgroup sees gVisor's own tasks, about ten
    per process: the backend scales it), and a memory bomb kills the whole sandbox, which says it broke
    by itself (the episode's exit_cause 'sandbox'), not the infrastructure."""
    from insandbox.core.errors import SandboxBrokenByItself

    async def go():
        sb = await sandbox_factory(limits=SandboxLimits(runtime=GVISOR, pids=64))
        many = await sb.run("for i in $(seq 40); do sleep 30 & done; sleep 1; ls /proc | grep -c '^[0-9]'")
        try:  # past the limit gVisor's kernel dies: the sandbox's doing, never masked as the infrastructure's
            await sb.run("for i in $(seq 400); do sleep 30 & done; sleep 5")
            bomb = "survived"
        except SandboxBrokenByItself as e:
            bomb = f"broken by itself: {e}"
        big = await sandbox_factory(limits=SandboxLimits(runtime=GVISOR, memory="256m"))
        try:
            await big.run("python3 -c 'b = bytearray(600 * 1024 ** 2); print(len(b))'")
        except SandboxBrokenByItself as e:
            return many.output, bomb, f"broken by itself: {e}"
        return many.output, bomb, "survived"

    many, fork_bomb, memory_bomb = run_async(go())
    assert int(many.split()[-1]) >= 40, many  # unscaled, 64 host tasks die at about 8 processes
    assert fork_bomb.startswith("broken by itself"), fork_bomb
    assert memory_bomb.startswith("broken by itself"), memory_bomb


def test_every_network_mode_under_gvisor(sandbox_factory, run_async):
    with tcp_server("127.0.0.1") as lo, tcp_server("0.0.0.0") as anywhere:
        targets = [f"127.0.0.1:{lo}", *[f"{ip}:{anywhere}" for ip in host_addresses()]]

        async def probe(mode):
            sb = await sandbox_factory(limits=SandboxLimits(runtime=GVISOR, network=mode))
            await sb.write_file("/tmp/probe.py", PROBE.encode())
            res = await sb.exec(["python3", "/tmp/probe.py", *targets], timeout=60)
            proxy = (await sb.run("curl -sS -m 20 -o /dev/null -w '%{http_code}' http://example.com/ 2>&1",
                                  timeout=60)).output if mode == "registries" else ""
            return json.loads(res.stdout), proxy, sb.isolated

        seen = {mode: run_async(probe(mode)) for mode in ("bridge", "none", "registries", "host")}
    for mode in ("bridge", "none", "registries"):
        assert seen[mode][0][f"127.0.0.1:{lo}"] != "ok", (mode, seen[mode])
    assert all(v != "ok" for v in seen["none"][0].values())
    assert all(v != "ok" for v in seen["registries"][0].values()) and seen["registries"][1] == "403"
    assert seen["bridge"][2] and seen["registries"][2]  # their packet filters apply under gVisor too
    assert seen["host"][0][f"127.0.0.1:{lo}"] == "ok"


def test_the_disk_limit_and_copy_back_under_gvisor(sandbox_factory, run_async, tmp_path):
    async def go():
        sb = await sandbox_factory(limits=SandboxLimits(runtime=GVISOR, disk="200m"))  # the limit: on /testbed
        full = await sb.run("head -c 400000000 /dev/zero 2>&1 > /testbed/fill; du -sm /testbed/fill | cut -f1",
                            timeout=120)
        await sb.run("rm /testbed/fill; mkdir -p /testbed/output/a && echo kept > /testbed/output/a/f.txt && "
                     "ln -s /etc/passwd /testbed/output/link && mkfifo /testbed/output/pipe")
        copied = await sb.copy_out("/testbed/output", tmp_path / "files")
        return full.output, copied

    full, copied = run_async(go())
    assert "No space left" in full and int(full.split()[-1]) <= 200, full  # /testbed: /tmp is gVisor's own memory
    assert copied.files == ["a/f.txt"] and (tmp_path / "files/a/f.txt").read_text() == "kept\n"
    assert sorted(s.path for s in copied.skipped) == ["link", "pipe"]


def test_a_pool_under_gvisor_starts_fresh_sandboxes(docker_image, run_async):
    async def go():
        async with SandboxPool(SandboxSpec(image=docker_image, run_id="gvisor-pool",
                                           limits=SandboxLimits(runtime=GVISOR)), size=1) as pool:
            first = await pool.acquire()
            why = first.info().get("not_recyclable", "")
            await first.run("echo left > /testbed/left.txt")
            pool.release(first)
            second = await pool.acquire()
            left = (await second.run("ls /testbed")).output
            pool.release(second)
            return why, second is first, left

    why, reused, left = run_async(go())
    assert "gVisor" in why and not reused and "left.txt" not in left


def test_fork_and_replay_under_gvisor(scripted, run_async, tmp_path, docker_image):
    run = tmp_path / "run"
    original = scripted({"turns": [
        {"tool": "execute_bash", "args": {"command": "echo base > /tmp/data.txt && export V=kept"}},
        {"tool": "execute_bash", "args": {"command": "cat /tmp/data.txt"}}, {"tool": "submit"}]})
    result = run_async(arun("go", model="m", base_url=original.url, output_dir=run, image=docker_image,
                            runtime=GVISOR, max_steps=5))
    assert result.trajectory.exit_reason == "submitted"
    r = cli("replay", str(run), "--runtime", GVISOR, "-q")
    assert r.returncode == 0 and "3 identical, 0 differ" in r.stdout, (r.stdout, r.stderr)
    assert "granted from the command line: --runtime gvisor" in r.stderr  # a run folder grants no runtime
    branch = scripted({"turns": [{"content": "x"}, {"tool": "execute_bash", "args": {
        "command": 'echo "$(cat /tmp/data.txt) $V" > /testbed/answer.txt'}}, {"tool": "submit"}]})
    r = cli("fork", str(run), "--step", "1", "--branches", "1", "--runtime", GVISOR, "--base-url", branch.url, "--json")
    assert r.returncode == 0, r.stderr
    assert (run / "forks/step-1/branch-1/answer.txt").read_text() == "base kept\n"


def test_a_benchmark_and_rl_rollouts_under_gvisor(scripted, run_async, tmp_path, docker_image):
    """`bench` and RL rollouts take --runtime from their settings: every sandbox of both runs under
    gVisor, fresh for each sample (never recycled), and the answers come back."""
    from insandbox.bench.runner import BenchConfig, run_bench
    from insandbox.config import RunConfig
    from insandbox.models.local_server import default_gguf
    from insandbox.rl.rewards import RewardResult
    from insandbox.rl.rollout import RolloutConfig, Rollouts, check_record
    from insandbox.rl.rollout.backends import load_gguf_tokenizer
    from insandbox.rl.rollout.backends.scripted import ScriptedGenerator

    task = tmp_path / "probe.yaml"
    task.write_text("name: probe\nextends: _base\nscorer: exact\ninstance_prompt: |-\n  {problem_statement}\n")
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{i}", "problem_statement": f"probe {i}", "ground_truth": "gvisor"})
                            + "\n" for i in range(3)))
    # dmesg inside gVisor prints its own boot banner: the answer says the sample ran under it
    look = "dmesg 2>/dev/null | grep -qi gvisor && echo gvisor > /testbed/answer.txt || echo runc > /testbed/answer.txt"
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": look}}, {"tool": "submit"}]})
    cfg = BenchConfig(task=str(task), data=str(data), concurrency=2, output_dir=str(tmp_path / "bench"),
                      run=RunConfig(model="m", base_url=srv.url, image=docker_image, runtime=GVISOR, max_steps=4))
    result = run_async(run_bench(cfg))
    assert [r["score"] for r in result.records] == [1.0] * 3, [r["error"] for r in result.records]
    assert result.summary["session"]["sandbox_pool"]["recycled"] == 0

    async def exact(row, outcome, config):
        ok = float((outcome.answer or "").strip() == row["ground_truth"])
        return RewardResult(value=ok, correct=ok, detail={})

    def call(name: str, **args) -> str:
        return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'

    r = Rollouts(load_gguf_tokenizer(default_gguf()),
                 RolloutConfig(image=docker_image, runtime=GVISOR, network="none", max_steps=4), reward_fn=exact)
    gen = ScriptedGenerator(r.chat, [{"turns": [call("execute_bash", command=look), call("submit")]}])
    records = run_async(r.run_groups([{"id": "t", "problem_statement": "where?", "ground_truth": "gvisor"}], gen,
                                     n=2, concurrency=2))
    assert [x.reward for x in records] == [1.0, 1.0], [x.error for x in records]
    assert all(check_record(x, r.chat) == [] for x in records)
