"""The bwrap backend as a Slurm job would run it: an unprivileged user, a clean environment, no Docker
engine (DOCKER_HOST points at nothing), the root filesystem from a tar. A whole task, a benchmark,
the limits that hold, the network modes, and nothing left behind: after close, and after the owner is
SIGKILLed and `insandbox clean --backend bwrap` ran."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

START = """
import asyncio, json, os, sys
from insandbox.sandbox import SandboxLimits, SandboxSpec, create_sandbox
"""


def _procs_of(uid: int) -> int:
    return sum(1 for p in Path("/proc").iterdir() if p.name.isdigit() and _uid(p) == uid)


def _uid(p: Path) -> int:
    try:
        return p.stat().st_uid
    except OSError:
        return -1


def _sandbox_folders(as_user) -> list[str]:
    r = as_user("import json; from insandbox.sandbox.bwrap import launch; "
                "print(json.dumps([str(p) for p, _, _ in launch.folders()]))")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_whole_task_as_an_unprivileged_user_without_docker(as_user, scripted, user_tmp):
    srv = scripted({"turns": [
        {"tool": "execute_bash", "args": {"command": "id -u; echo 42 > answer.txt; mkdir -p output && "
                                                    "echo made > output/report.txt && touch /usr/local/bin/mine"}},
        {"tool": "submit"}]})
    out = user_tmp
    got = as_user.json(START + f"""
from insandbox import arun
r = asyncio.run(arun("6 x 7?", model="scripted", base_url={srv.url!r}, output_dir={str(out / 'r')!r},
                     backend="bwrap", network="none", max_steps=4))
print(json.dumps({{"exit": r.trajectory.exit_reason, "answer": r.answer, "files": sorted(r.files),
                  "first": r.trajectory.steps[0].tool_calls[0].output, "sandbox": r.trajectory.sandbox}}))
""")
    assert got["exit"] == "submitted" and got["answer"] == "42\n" and got["files"] == ["report.txt"]
    assert got["first"].startswith("0\n")  # root inside, without being root outside
    assert got["sandbox"]["backend"] == "bwrap" and got["sandbox"]["source"].startswith("tar ")
    assert (out / "r" / "files" / "report.txt").stat().st_uid == as_user.user.pw_uid
    assert not os.path.lexists(got["sandbox"]["folder"])  # closed and removed


def test_limits_hold_per_sandbox(as_user):
    """A fork bomb stops at the pids limit (counted per sandbox: the user's other processes on the host
    do not count, and the host can still fork), a file past the size cap fails, a process past the
    memory limit gets MemoryError; the sandbox answers after each."""
    got = as_user.json(START + """
import subprocess
host = [subprocess.Popen(["sleep", "60"]) for _ in range(80)]  # the user's own processes on the host
async def main():
    sb = create_sandbox(SandboxSpec(run_id="limits", limits=SandboxLimits(network="none", pids=64, memory="256m",
                                                                        disk="1m")), "bwrap")
    await sb.start()
    out = {}
    r = await sb.run("for i in $(seq 40); do sleep 30 & done; ls /proc | grep -c '^[0-9]'")
    out["forty"] = r.output.split()[-1]
    r = await sb.run(":(){ :|:& };:; sleep 2; ls /proc | grep -c '^[0-9]' || echo counted", timeout=8)
    out["bomb"] = r.output[-300:]
    out["bomb_timed_out"] = r.timed_out
    out["alive_after_bomb"] = (await sb.run("echo alive")).output
    r = await sb.run("head -c 2000000 /dev/zero > /tmp/big; echo rc=$?; stat -c %s /tmp/big")
    out["fsize"] = r.output
    r = await sb.run("python3 -c 'x = bytearray(512 * 2**20)'; echo rc=$?")
    out["memory"] = r.output[-300:]
    out["alive"] = (await sb.run("echo alive")).output
    out["host_forks"] = subprocess.run(["true"]).returncode == 0
    await sb.close()
    print(json.dumps(out))
try:
    asyncio.run(main())
finally:
    for p in host:
        p.kill()
""")
    assert int(got["forty"]) >= 41  # 40 sleeps while the user has 80 more processes outside
    assert "Resource temporarily unavailable" in got["bomb"] or "fork" in got["bomb"].lower(), got["bomb"]
    assert got["alive_after_bomb"] == "alive\n" and got["host_forks"]
    assert "File size limit exceeded" in got["fsize"] and "rc=153" in got["fsize"], got["fsize"]
    assert got["fsize"].split()[-1] == "1048576"  # the file stopped at the cap
    assert "MemoryError" in got["memory"] and "rc=1" in got["memory"], got["memory"]
    assert got["alive"] == "alive\n"


def _probe(*targets: tuple[str, int]) -> str:
    """A command that tries a TCP connection to each target and says whether it got through."""
    return ("python3 -c \"import socket\nfor host, port in " + repr(targets).replace('"', "'") + ":\n"
            "    try:\n        socket.create_connection((host, port), timeout=3).close(); print(host, 'reached')\n"
            "    except OSError as e:\n        print(host, 'refused', type(e).__name__, e.errno)\"")


def _each_network(as_user, command: str, networks=("none", "bridge", "host")) -> dict:
    return as_user.json(START + f"""
async def main():
    out = {{}}
    for net in {networks!r}:
        sb = create_sandbox(SandboxSpec(run_id="net", limits=SandboxLimits(network=net)), "bwrap")
        await sb.start()
        out[net] = (await sb.run({command!r}, timeout=120)).output
        out[net + "_resolv"] = (await sb.read_file("/etc/resolv.conf")).decode()
        await sb.close()
    print(json.dumps(out))
asyncio.run(main())
""")


def test_each_network_mode_reaches_what_it_says(as_user, scripted):
    """none: nothing; bridge: not this machine's loopback (the model server), by any address; host: it."""
    srv = scripted({"turns": [{"tool": "submit"}]})  # a service listening on this machine's loopback
    port = int(srv.url.rsplit(":", 1)[1].split("/")[0])
    got = _each_network(as_user, _probe(("127.0.0.1", port), ("10.0.2.2", port)))
    assert got["none"].count("refused") == 2, got["none"]
    assert got["bridge"].count("refused") == 2, got["bridge"]
    assert "127.0.0.1 reached" in got["host"], got["host"]  # the model server too: hence the warning
    assert got["none_resolv"] == "# no network\n" and "nameserver 10.0.2.3" in got["bridge_resolv"]
    assert got["host_resolv"] == Path("/etc/resolv.conf").read_text()


@pytest.mark.network
def test_bridge_reaches_pypi_as_an_unprivileged_user(as_user):
    got = _each_network(as_user, "pip install --no-cache-dir --root-user-action=ignore six 2>&1 | tail -1; "
                                 "python3 -c 'import six; print(six.__file__)'; " + _probe(("1.1.1.1", 80)),
                        networks=("bridge", "none"))
    assert "Successfully installed six" in got["bridge"] and "/usr/local/lib/" in got["bridge"], got["bridge"]
    assert "1.1.1.1 reached" in got["bridge"] and "1.1.1.1 refused" in got["none"]


def test_nothing_is_left_after_a_sigkill_and_clean(as_user):
    """The owner SIGKILLed mid-command: its sandbox dies with it (stdin EOF, --die-with-parent), its
    folder stays until `insandbox clean --backend bwrap`, which leaves a live owner's sandbox alone."""
    hold = START + """
async def main():
    sb = create_sandbox(SandboxSpec(run_id=sys.argv[1], limits=SandboxLimits(network="none")), "bwrap")
    await sb.start()
    asyncio.ensure_future(sb.run("sleep 100", timeout=200))
    await asyncio.sleep(0.5)
    print(json.dumps({"pid": os.getpid(), "bwrap": sb.proc.pid, "init": sb.child_pid, "folder": str(sb.folder.path)}),
          flush=True)
    await asyncio.sleep(1000)
asyncio.run(main())
"""
    procs = [subprocess.Popen(as_user.argv(hold, (name,)), stdout=subprocess.PIPE, text=True, cwd="/tmp")
             for name in ("killed", "alive")]
    info = []
    try:
        info = [json.loads(p.stdout.readline()) for p in procs]
        killed, alive = info
        assert Path(f"/proc/{killed['init']}").exists()
        os.kill(killed["pid"], signal.SIGKILL)
        deadline = time.time() + 20
        while time.time() < deadline and (Path(f"/proc/{killed['init']}").exists()
                                          or Path(f"/proc/{killed['bwrap']}").exists()):
            time.sleep(0.1)
        assert not Path(f"/proc/{killed['init']}").exists() and not Path(f"/proc/{killed['bwrap']}").exists()
        assert Path(killed["folder"]).exists()  # left behind, for clean
        r = as_user("import sys; from insandbox.cli import main; sys.argv = ['insandbox', 'clean', '--backend', "
                    "'bwrap']; main()")
        assert r.returncode == 0, r.stderr
        assert f"removed {killed['folder']}" in r.stdout and "is gone" in r.stdout, r.stdout
        assert not Path(killed["folder"]).exists() and Path(alive["folder"]).exists()  # a live owner's is kept
        os.kill(alive["pid"], signal.SIGKILL)
        deadline = time.time() + 20
        while time.time() < deadline and Path(f"/proc/{alive['init']}").exists():
            time.sleep(0.1)
        r = as_user("import sys; from insandbox.cli import main; sys.argv = ['insandbox', 'clean', '--backend', "
                    "'bwrap']; main()")
        assert f"removed {alive['folder']}" in r.stdout
        assert not {killed["folder"], alive["folder"]} & set(_sandbox_folders(as_user))
    finally:
        for i in info:  # runuser's child: killing runuser would leave it
            try:
                os.kill(i["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in procs:
            p.wait()


def test_a_benchmark_as_an_unprivileged_user(as_user, scripted, user_tmp):
    tmp_path = user_tmp
    task = tmp_path / "probe.yaml"
    task.write_text("name: probe\nextends: _base\nscorer: exact\ninstance_prompt: |-\n  {problem_statement}\n")
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{i}", "problem_statement": f"probe {i}", "ground_truth": "clean"})
                            + "\n" for i in range(4)))
    # each sample finds a fresh sandbox (no recycling here), answers, and leaves a mark for the next
    look = "test -e /testbed/mark && echo dirty > /testbed/answer.txt || echo clean > /testbed/answer.txt; touch mark"
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": look}}, {"tool": "submit"}]})
    before = _sandbox_folders(as_user)
    got = as_user.json(f"""
import asyncio, json
from insandbox.bench.runner import BenchConfig, run_bench
from insandbox.config import RunConfig
cfg = BenchConfig(task={str(task)!r}, data={str(data)!r}, concurrency=2, output_dir={str(tmp_path / 'r')!r},
                  run=RunConfig(model="m", base_url={srv.url!r}, backend="bwrap", network="none", max_steps=4))
result = asyncio.run(run_bench(cfg))
print(json.dumps({{"scores": [r["score"] for r in result.records], "errors": [r["error"] for r in result.records],
                  "pool": result.summary["session"]["sandbox_pool"]}}))
""", timeout=600)
    assert got["scores"] == [1.0] * 4 and got["errors"] == [None] * 4, got
    assert got["pool"]["recycled"] == 0 and got["pool"]["started"] >= 4
    assert _sandbox_folders(as_user) == before  # every sandbox of the run removed


def test_without_a_cgroup_memory_is_rlimit_as_and_cgroup_mode_refuses(as_user):
    """The user may write no cgroup here: RLIMIT_AS holds --memory (a shared mapping past it fails, the
    sandbox answers after), the host still finds the sandbox's processes (by pid namespace) and sees
    its filter, normal work runs under the default 4g of address space; INSANDBOX_BWRAP_MEMORY=cgroup
    refuses in one line."""
    from tests.sandbox.bwrap.test_isolation import SHARED_MAPPING

    got = as_user.json(START + f"""
from insandbox.sandbox import SetupError
async def main():
    out = {{}}
    sb = create_sandbox(SandboxSpec(run_id="mem", limits=SandboxLimits(network="none", memory="64m")), "bwrap")
    await sb.start()
    out["held"], out["group"] = sb.info()["limits_held"]["memory"], sb.info()["cgroup"]
    out["mapping"] = (await sb.run({SHARED_MAPPING!r}, timeout=60)).output
    await sb.run("sleep 300 &")
    await asyncio.sleep(0.5)
    out["tasks"] = sorted(open(f"/proc/{{p}}/comm").read().strip() for p in sb.host_tasks())
    out["alive"] = (await sb.run("echo alive")).output
    await sb.close()
    sb = create_sandbox(SandboxSpec(run_id="work", limits=SandboxLimits(network="none")), "bwrap")
    await sb.start()
    out["work"] = (await sb.run("python3 -c 'from concurrent.futures import ThreadPoolExecutor as T; "
                                "print(sum(T(16).map(abs, range(100))))' && pip --version | cut -d' ' -f1 && "
                                "echo 'int main(void) {{ return 7; }}' > /tmp/t.c && gcc -o /tmp/t /tmp/t.c; "
                                "/tmp/t; echo rc=$?", timeout=120)).output
    await sb.close()
    os.environ["INSANDBOX_BWRAP_MEMORY"] = "cgroup"
    sb = create_sandbox(SandboxSpec(run_id="req", limits=SandboxLimits(network="none", memory="64m")), "bwrap")
    try:
        await sb.start()
        out["refused"] = None
    except SetupError as e:
        out["refused"] = str(e)
    print(json.dumps(out))
asyncio.run(main())
""")
    assert got["held"].startswith("RLIMIT_AS") and got["group"] is None
    assert "all touched" not in got["mapping"] and "Cannot allocate memory" in got["mapping"], got["mapping"]
    assert got["tasks"] == ["bash", "python3", "sleep"] and got["alive"] == "alive\n", got
    assert got["work"].split() == ["4950", "pip", "rc=7"], got["work"]
    assert got["refused"] and "needs a cgroup" in got["refused"] and "\n" not in got["refused"], got["refused"]
