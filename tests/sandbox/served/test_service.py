"""The sandbox service (`insandbox pool serve`, sandbox/served/): sandboxes kept ready and handed out once
each, commands that use them through --pool-url, a configuration that differs refused in one line, a
client that dies leaking nothing, a stop removing everything. A real service process, real containers,
real HTTP."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from insandbox.agent.env import EnvConfig, SandboxEnv, Task
from insandbox.sandbox import SandboxLimits
from insandbox.sandbox.served import protocol
from tests.helpers import cli, containers_with_label

EXE = str(Path(sys.executable).parent / "insandbox")
ENV = {**os.environ, "INSANDBOX_POOL_LEASE_TTL": "4"}
SCRIPT = {"scripts": [{"match": "", "turns": [
    {"tool": "execute_bash", "args": {"command": "echo 42 > /testbed/answer.txt; hostname"}},
    {"tool": "submit"}]}]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(url: str) -> dict:
    r = cli("pool", "status", "--pool-url", url, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


class Service:
    def __init__(self, *args: str, tmp: Path):
        self.log = tmp / "service.log"
        self.proc = subprocess.Popen([EXE, "pool", "serve", *args], stdout=open(self.log, "w"),
                                     stderr=subprocess.STDOUT, env=ENV)

    def wait_ready(self, url: str, n: int, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, self.log.read_text()
            r = cli("pool", "status", "--pool-url", url)
            if r.returncode == 0 and f"ready: {n}" in r.stdout.splitlines():
                return _status(url)
            assert time.monotonic() < deadline, (r.stdout, r.stderr, self.log.read_text())
            time.sleep(0.3)

    def stop(self, sig=signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(60)


def test_a_service_serves_runs_and_benchmarks_and_stops_clean(scripted, tmp_path, docker_image):
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    before = set(containers_with_label("insandbox.run_id=pool"))
    service = Service("--size", "3", "--port", str(port), "--image", docker_image, "--network", "none", tmp=tmp_path)
    try:
        status = service.wait_ready(url, 3)
        assert (status["handed_out"], status["failed"], status["config"]["network"]) == (0, 0, "none")
        token = protocol.token_file("127.0.0.1", port)
        assert token.is_file() and oct(token.stat().st_mode & 0o777) == "0o600"
        srv = scripted(SCRIPT)
        r = cli("run", "x", "--model", "m", "--base-url", srv.url, "--pool-url", url, "--image", docker_image,
                "--network", "none", "--out", str(tmp_path / "run"), timeout=120)
        assert r.returncode == 0, r.stderr
        assert (tmp_path / "run" / "answer.txt").read_text().strip() == "42"
        traj = json.loads((tmp_path / "run" / "trajectory.json").read_text())
        assert traj["sandbox"]["served_by"] == url
        # a command whose sandboxes would differ is refused in one line, naming the difference
        r = cli("run", "x", "--model", "m", "--base-url", srv.url, "--pool-url", url, "--image", docker_image,
                "--network", "none", "--memory", "1g", timeout=60)
        assert r.returncode == 2 and "memory: the service's is" in r.stderr and len(r.stderr.splitlines()) == 1
        # without the token: refused (a local user that did not start it)
        async def raw():
            import aiohttp
            async with aiohttp.ClientSession() as s, s.get(f"{url}/v1/status") as resp:
                return resp.status
        assert asyncio.run(raw()) == 401

        # with the token, but another client's lease guessed: lease ids are not guessable
        async def guess():
            import aiohttp
            headers = {"Authorization": f"Bearer {token.read_text().strip()}"}
            async with aiohttp.ClientSession(headers=headers) as s:
                async with s.post(f"{url}/v1/leases/L1/call", json={"op": "run", "args": {"command": "id"}}) as resp:
                    return resp.status, await resp.json()
        status, body = asyncio.run(guess())
        assert status == 404 and "lease is over" in body["error"]["message"]
        # a benchmark through it, several samples at once
        rows = tmp_path / "rows.jsonl"
        rows.write_text("".join(json.dumps({"id": f"q{i}", "problem_statement": "p", "ground_truth": "42"}) + "\n"
                                for i in range(6)))
        r = cli("bench", "math", "--data", str(rows), "--repeats", "1", "--model", "m", "--base-url", srv.url,
                "--pool-url", url, "--image", docker_image, "--network", "none", "--concurrency", "3",
                "--out", str(tmp_path / "bench"), "-q", timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        summary = json.loads((tmp_path / "bench" / "summary.json").read_text())
        assert summary["session"]["sandbox_pool"]["claims"] == 6
        assert summary["session"]["sandbox_pool"]["served_by"] == url
        after = service.wait_ready(url, 3)
        assert after["served"] == 7 and after["handed_out"] == 0
    finally:
        assert service.stop() == 0, service.log.read_text()
    assert set(containers_with_label("insandbox.run_id=pool")) <= before  # SIGTERM: every sandbox removed
    assert not protocol.token_file("127.0.0.1", port).exists()


def test_each_sandbox_goes_to_one_client_and_a_dead_client_leaks_nothing(tmp_path, docker_image, run_async):
    sock = tmp_path / "pool.sock"
    url = f"unix://{sock}"
    before = set(containers_with_label("insandbox.run_id=pool"))
    service = Service("--size", "2", "--socket", str(sock), "--image", docker_image, "--network", "none",
                      tmp=tmp_path)
    try:
        service.wait_ready(url, 2)
        assert oct(sock.stat().st_mode & 0o777) == "0o600"
        # the Python API: SandboxEnv takes the same URL; two at once get two different sandboxes
        async def two():
            envs = [SandboxEnv(EnvConfig(image=docker_image, pool_url=url, limits=SandboxLimits(network="none")))
                    for _ in range(2)]
            names = []
            for env in envs:
                await env.reset(Task(prompt="x"))
                names.append(env.sandbox.info()["name"])
                assert (await env.sandbox.run("echo ok")).output.strip() == "ok"
            for env in envs:
                await env.close()
            return names
        names = run_async(two())
        assert len(set(names)) == 2
        # a client killed while it holds a sandbox: its lease expires (4 s here) and the sandbox goes
        holder = subprocess.Popen([sys.executable, "-c", (
            "import asyncio, sys\n"
            "from insandbox.sandbox import SandboxLimits, SandboxSpec\n"
            "from insandbox.sandbox.served.client import ServedPool\n"
            "async def main():\n"
            f"    pool = ServedPool({url!r}, SandboxSpec(image={docker_image!r}, limits=SandboxLimits(network='none')),"
            " 'docker')\n"
            "    sb = await pool.acquire(); print(sb.info()['name'], flush=True); await asyncio.sleep(600)\n"
            "asyncio.run(main())\n")], stdout=subprocess.PIPE, text=True, env=ENV)
        held = holder.stdout.readline().strip()
        assert held and _status(url)["handed_out"] == 1
        holder.kill()
        holder.wait()
        deadline = time.monotonic() + 30
        while _status(url)["handed_out"]:
            assert time.monotonic() < deadline, "the dead client's lease never expired"
            time.sleep(0.5)
        gone = subprocess.run(["docker", "ps", "-aq", "--filter", f"name=^{held}$"], capture_output=True, text=True)
        assert not gone.stdout.strip()
    finally:
        service.stop(signal.SIGKILL)
    # a SIGKILLed service: its sandboxes are found by insandbox clean (their owner is gone)
    left = sorted(set(containers_with_label("insandbox.run_id=pool")) - before)
    assert left
    deadline = time.monotonic() + 20
    while left:
        r = cli("clean")
        assert r.returncode == 0, r.stderr
        left = [c for c in left if subprocess.run(["docker", "inspect", c], capture_output=True).returncode == 0]
        assert time.monotonic() < deadline, left
        time.sleep(0.5)


def test_a_bwrap_service_serves_bwrap_sandboxes(tmp_path, docker_image, run_async):
    """The service is backend-neutral: bubblewrap sandboxes (no engine) are served the same way."""
    sock = tmp_path / "bwrap.sock"
    url = f"unix://{sock}"
    service = Service("--backend", "bwrap", "--size", "1", "--socket", str(sock), "--image", docker_image,
                      "--network", "none", tmp=tmp_path)
    try:
        status = service.wait_ready(url, 1)
        assert status["config"]["backend"] == "bwrap"

        async def use():
            env = SandboxEnv(EnvConfig(backend="bwrap", image=docker_image, pool_url=url,
                                       limits=SandboxLimits(network="none")))
            await env.reset(Task(prompt="x"))
            out = (await env.sandbox.run("echo served; cat /proc/1/comm")).output.split()
            await env.close()
            return out
        assert run_async(use())[0] == "served"
        assert service.wait_ready(url, 1)["served"] == 1
    finally:
        assert service.stop() == 0, service.log.read_text()
