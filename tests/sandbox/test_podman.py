"""The Docker backend against Podman's Docker API (`podman system service`), rootful and rootless.

The tests start the services themselves, on sockets of their own, copy the sandbox image from the
Docker engine into Podman's stores (once per image: `docker save | podman load`), point the backend
at them through DOCKER_HOST and stop them at the end. Rootless Podman runs as a user of its own,
made here when missing (`insandbox-podman`). A missing `podman` is a failure: scripts/setup.sh
installs it. What Podman cannot do is checked to be refused in one line (the disk limit; memory, CPU
and process limits under rootless Podman without cgroup controllers; recycling under rootless).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from insandbox.sandbox import SandboxError, SandboxLimits, SandboxSpec, SetupError, create_sandbox
from insandbox.sandbox.docker import LABEL, LABEL_OWNER, DockerSandbox, engine, limits, owner_label, proxy
from tests.helpers import REPO, cli
from tests.sandbox import podman_service
from tests.sandbox.conftest import cache_of
from tests.sandbox.network_peer import SLIRP_GATEWAY, TCP_PORT, UDP_PORT
from tests.sandbox.podman_service import Service, engine_at, load_image, need_podman, shut_down
from tests.sandbox.test_network import host_addresses, host_connects, tcp_server, udp_echo

pytestmark = pytest.mark.docker

IMAGE = "insandbox:latest"
USER = "insandbox-podman"  # rootless Podman's user
CAP_NAMES = {0: "CHOWN", 1: "DAC_OVERRIDE", 3: "FOWNER", 4: "FSETID", 5: "KILL", 6: "SETGID", 7: "SETUID"}
NO_LIMITS = SandboxLimits(memory=None, cpus=None, pids=None)

# connect to "ip:port" and say what happened
PROBE = ("import socket, sys\nip, port = sys.argv[1].rsplit(':', 1)\ntry:\n"
         "    socket.create_connection((ip, int(port)), 3).recv(5); print('reached')\n"
         "except OSError as e:\n    print(repr(e))\n")
LISTEN = ("import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('0.0.0.0', 9000)); s.listen()\nwhile True:\n    c, _ = s.accept(); c.sendall(b'hello'); c.close()\n")


@pytest.fixture(scope="module")
def rootful_service(docker_image):
    with podman_service.rootful_service() as service:
        yield service


def _rootless_user() -> pwd.struct_passwd:
    """The user rootless Podman runs as, made once: a home, subordinate ids, overlay storage (the
    default on this kernel would be vfs, a full copy of the image per container)."""
    try:
        user = pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
        user = pwd.getpwnam(USER)
    for table in ("/etc/subuid", "/etc/subgid"):
        if not any(line.split(":")[0] == USER for line in Path(table).read_text().splitlines()):
            flag = "--add-subuids" if table.endswith("uid") else "--add-subgids"
            subprocess.run(["usermod", flag, "300000-365535", USER], check=True)
    storage = Path(user.pw_dir, ".config/containers/storage.conf")
    if not storage.exists():
        subprocess.run(["runuser", "-u", USER, "--", "mkdir", "-p", str(storage.parent)], check=True)
        subprocess.run(["runuser", "-u", USER, "--", "sh", "-c", f"printf '[storage]\\ndriver = \"overlay\"\\n' > "
                        f"{storage}"], check=True)
    return user


@pytest.fixture(scope="module")
def rootless_service(docker_image):
    need_podman()
    user = _rootless_user()
    runtime = Path(f"/run/user/{user.pw_uid}")
    runtime.mkdir(parents=True, exist_ok=True)
    os.chown(runtime, user.pw_uid, user.pw_gid)
    os.chmod(runtime, 0o700)
    folder = runtime / "insandbox-test"
    folder.mkdir(exist_ok=True)
    os.chown(folder, user.pw_uid, user.pw_gid)
    service = Service(folder, user=USER, env={"XDG_RUNTIME_DIR": str(runtime), "HOME": user.pw_dir})
    service.start()
    try:
        load_image(service, USER)
        yield service
    finally:
        shut_down(service)
        pause = runtime / "libpod/tmp/pause.pid"  # what keeps rootless Podman's namespaces between commands
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pause.read_text().strip()), signal.SIGKILL)


@pytest.fixture
def rootful(rootful_service):
    with engine_at(rootful_service.host):
        yield rootful_service


@pytest.fixture
def rootless(rootless_service):
    with engine_at(rootless_service.host):
        yield rootless_service


async def _started(made: list, **spec) -> DockerSandbox:
    sb = create_sandbox(SandboxSpec(image=IMAGE, run_id="podman", **spec))
    made.append(sb)
    await sb.start()
    return sb


def run(coro_fn):
    """Run `coro_fn(made)`; every sandbox it made is closed afterwards, whatever happened."""
    async def main():
        made: list = []
        try:
            return await coro_fn(made)
        finally:
            for sb in made:
                with contextlib.suppress(Exception):
                    await sb.close()
    return asyncio.run(main())


# ---------------------------------------------------------------------- rootful
def test_a_run_from_the_command_line(rootful, scripted, tmp_path):
    srv = scripted({"name": "m", "turns": [
        {"tool": "execute_bash", "args": {"command": "mkdir -p /testbed/output && python3 -c 'print(sum(range(10)))' "
                                                    "> /testbed/output/sum.txt && cat /run/.containerenv; echo x"}},
        {"tool": "str_replace_editor", "args": {"command": "create", "path": "/testbed/answer.txt",
                                                "file_text": "45\n"}},
        {"tool": "submit", "args": {}}]})
    r = cli("run", "sum", "--model", "m", "--base-url", srv.url, "--out", str(tmp_path / "run"), "-q", "--json",
            env={"DOCKER_HOST": rootful.host})
    assert r.returncode == 0, r.stderr
    traj = json.loads((tmp_path / "run" / "trajectory.json").read_text())
    assert traj["exit_reason"] == "submitted", traj["exit_reason"]
    assert (tmp_path / "run" / "files" / "sum.txt").read_text() == "45\n"
    assert (tmp_path / "run" / "answer.txt").read_text() == "45\n"
    assert traj["steps"][0]["tool_calls"][0]["output"].split()[0] == "x"  # the engine's file is ours: empty
    # the one thing Podman's sandboxes go without, said once
    assert "warning: sandboxes get no disk limit" in r.stderr and "Podman" in r.stderr, r.stderr
    assert rootful.api().containers(all=True, filters={"label": f"{LABEL}=1"}) == []


def test_a_benchmark_and_rl_rollouts_on_podman(rootful, scripted, tmp_path):
    """`bench` (recycled sandboxes from the pool) and RL rollouts on Podman's service: each sample
    proves it ran there (Podman's own /run/.containerenv, emptied by insandbox, exists only on Podman)."""
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
    data.write_text("".join(json.dumps({"id": f"p{i}", "problem_statement": f"probe {i}", "ground_truth": "podman"})
                            + "\n" for i in range(4)))
    look = ("test -e /run/.containerenv && test ! -e /testbed/mark && echo podman > /testbed/answer.txt "
            "|| echo other > /testbed/answer.txt; touch /testbed/mark")
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": look}}, {"tool": "submit"}]})
    # two sandboxes alive at most: the last two samples must get recycled ones (with the default size of
    # four, the pool could start one per sample ahead and recycle none)
    cfg = BenchConfig(task=str(task), data=str(data), concurrency=2, pool_size=2, output_dir=str(tmp_path / "bench"),
                      run=RunConfig(model="m", base_url=srv.url, image=IMAGE, max_steps=4))
    result = asyncio.run(run_bench(cfg))
    assert [r["score"] for r in result.records] == [1.0] * 4, [r["error"] for r in result.records]
    assert result.summary["session"]["sandbox_pool"]["recycled"] >= 1  # and the mark never seen again

    async def exact(row, outcome, config):
        ok = float((outcome.answer or "").strip() == row["ground_truth"])
        return RewardResult(value=ok, correct=ok, detail={})

    def call(name: str, **args) -> str:
        return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'

    r = Rollouts(load_gguf_tokenizer(default_gguf()),
                 RolloutConfig(image=IMAGE, network="none", max_steps=4), reward_fn=exact)
    gen = ScriptedGenerator(r.chat, [{"turns": [call("execute_bash", command=look), call("submit")]}])
    records = asyncio.run(r.run_groups([{"id": "t", "problem_statement": "where?", "ground_truth": "podman"}], gen,
                                       n=2, concurrency=2))
    assert [x.reward for x in records] == [1.0, 1.0], [x.error for x in records]
    assert all(check_record(x, r.chat) == [] for x in records)
    assert rootful.api().containers(all=True, filters={"label": f"{LABEL}=1"}) == []


def test_shell_files_and_failures(rootful, tmp_path):
    async def body(made):
        sb = await _started(made, limits=SandboxLimits(network="none"))
        await sb.run("cd /tmp && export FOO=bar")
        r = await sb.run("echo $FOO; pwd")
        assert r.output.split() == ["bar", "/tmp"]
        r = await sb.run("nohup sleep 100 >/dev/null 2>&1 & setsid sleep 100 & sleep 100", timeout=2)
        assert r.timed_out
        r = await sb.run("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | "
                         "grep -c '^sleep'")
        assert r.output.split()[-1] == "0", r.output  # (bash may first report the jobs it lost)
        data = {"tabs.py": b"def f():\n\treturn 1\t# tab\n", "crlf.csv": b"a,b\r\n1,2\r\n",
                "nonl.txt": b"no newline", "bin": bytes(range(256)) * 8192}
        for fast in (1 << 20, 0):  # through the server, then through Podman's archive API
            sb.spec.fast_file_max_bytes = fast
            for name, blob in data.items():
                await sb.write_file(f"/testbed/output/{fast}-{name}", blob)
                assert await sb.read_file(f"/testbed/output/{fast}-{name}") == blob
        sb.spec.fast_file_max_bytes = 1 << 20
        await sb.channel.close()  # the server gone: the container stops, and the engine still has the files
        out = await sb.copy_out("/testbed/output", tmp_path / "out")
        assert sorted(out.files) == sorted(f"{f}-{n}" for f in (1 << 20, 0) for n in data)
        assert (tmp_path / "out" / "0-bin").read_bytes() == data["bin"]
        await sb.close()  # Podman's rm -f of a container that is stopping by itself
        with pytest.raises(Exception) as gone:
            engine.api().inspect_container(sb.container_id)
        assert engine.is_not_found(gone.value)

        other = await _started(made, limits=SandboxLimits(network="none"))
        engine.api().kill(other.container_id)
        with pytest.raises(SandboxError) as e:
            await other.run("echo hi")
        assert "gone" in str(e.value) and "killed through the engine's API" in str(e.value), e.value
    run(body)


def test_limits_and_the_engines_files(rootful):
    async def body(made):
        sb = await _started(made, limits=SandboxLimits(memory="256m", cpus=0.5, pids=64, network="none"))
        caps = (await sb.run("grep -E '^(CapEff|NoNewPrivs)' /proc/self/status")).output.split()
        eff = int(caps[caps.index("CapEff:") + 1], 16)
        assert {CAP_NAMES.get(i, str(i)) for i in range(64) if eff >> i & 1} == set(limits.KEPT_CAPABILITIES)
        assert caps[caps.index("NoNewPrivs:") + 1] == "1"
        r = await sb.run("cd /sys/fs/cgroup; cat memory/memory.limit_in_bytes memory.max pids/pids.max pids.max "
                         "cpu/cpu.cfs_quota_us cpu.max 2>/dev/null")
        assert str(256 * 1024 ** 2) in r.output.split() and "64" in r.output.split(), r.output
        assert "50000" in r.output, r.output
        r = await sb.run("for f in /etc/hosts /etc/resolv.conf /etc/hostname /run/.containerenv; do "
                         "echo x >> $f || echo refused $f; done 2>&1; grep -c sandbox /etc/hosts")
        assert r.output.count("Read-only file system") == 4 and r.output.split()[-1] == "1", r.output
        assert sb.info()["disk_limit"] is None
        mode, why = limits.disk_mode(engine.api())
        assert mode is None and "Podman" in why, why
        told: list[str] = []
        await DockerSandbox.prepare(SandboxSpec(image=IMAGE, limits=SandboxLimits(network="none")), told.append)
        assert all("Podman" in line for line in told if "disk limit" in line), told
    run(body)


def test_sandboxes_are_kept_apart_and_from_the_host(rootful):
    import socket

    host_service = socket.socket()
    host_service.bind(("127.0.0.1", 0))
    host_service.listen()
    port = host_service.getsockname()[1]

    async def body(made):
        a = await _started(made)
        b = await _started(made)
        assert a.isolated and b.isolated
        await a.write_file("/tmp/listen.py", LISTEN.encode())
        await a.run("nohup python3 /tmp/listen.py >/dev/null 2>&1 & sleep 1")
        address = engine.api().inspect_container(a.container_id)["NetworkSettings"]["Networks"]
        address, gateway = next((n["IPAddress"], n["Gateway"]) for n in address.values())
        assert "reached" in (await a.run("python3 -c \"import socket; socket.create_connection(('127.0.0.1', 9000), "
                                         "3).recv(5); print('reached')\"")).output
        await b.write_file("/tmp/probe.py", PROBE.encode())
        for target in (f"{address}:9000", f"127.0.0.1:{port}", f"{gateway}:{port}"):
            assert "reached" not in (await b.run(f"python3 /tmp/probe.py {target}")).output, target
        cut = await _started(made, limits=SandboxLimits(network="none"))
        await cut.write_file("/tmp/probe.py", PROBE.encode())
        assert "unreachable" in (await cut.run("python3 /tmp/probe.py 1.1.1.1:443")).output
    try:
        run(body)
    finally:
        host_service.close()


class Peer:
    """A sandbox in a process of its own (tests/sandbox/network_peer.py): sandboxes of Docker, Podman and
    bwrap side by side, each engine's client in its own process."""

    def __init__(self, backend: str, env: dict):
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.sandbox.network_peer", backend, "bridge"],
                                     cwd=REPO, env={**os.environ, **env}, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.label = f"{backend}@{env.get('DOCKER_HOST', 'docker')}"
        first = self._answer(300)
        assert "error" not in first, (self.label, first["error"])
        self.address, self.gateway = first["address"], first["gateway"]

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")  # it exited

    def _answer(self, timeout: float) -> dict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the {self.label} sandbox did not answer in {timeout} s") from None
        assert line, f"the {self.label} sandbox's process exited ({self.proc.poll()})"
        return json.loads(line)

    def ask(self, **request) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._answer(120)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def test_sandboxes_of_docker_podman_and_bwrap_never_reach_each_other(rootful_service, request, tmp_path):
    """A TCP server and a UDP listener in a Docker sandbox, in a rootful Podman sandbox and in a bwrap
    sandbox (--network bridge, slirp4netns), all at once. No other sandbox reaches them, whatever its
    engine, nor does this machine itself: slirp4netns and both engines' NAT make the other engine's
    connections arrive from the gateway, which a sandbox must not take for a sign of trust. Each still
    reaches a service of this machine at its gateway, and gets replies to its own UDP."""
    bwrap_env = {"INSANDBOX_ROOTFS": str(request.getfixturevalue("rootfs_tar")),
                 "INSANDBOX_ROOTFS_CACHE": str(cache_of(os.geteuid())), "INSANDBOX_BWRAP_DIR": str(tmp_path / "bwrap")}
    peers: dict[str, Peer] = {}
    try:
        with tcp_server("0.0.0.0") as host_port, udp_echo() as echo_port:
            peers["docker"] = Peer("docker", {})
            peers["docker2"] = Peer("docker", {})
            peers["podman"] = Peer("docker", {"DOCKER_HOST": rootful_service.host})
            peers["bwrap"] = Peer("bwrap", bwrap_env)
            servers = ("docker", "podman", "bwrap")
            for name in servers:
                assert peers[name].ask(listen=True)["own"] == "hello", name  # the servers answer from inside
            docker, podman = peers["docker"].address, peers["podman"].address
            # what a sandbox could try, for each server: its own address, and (bwrap) every address of this
            # machine, where slirp4netns would listen for a port it forwards
            targets = {"docker": [docker], "podman": [podman],
                       "bwrap": [peers["bwrap"].address, *host_addresses()]}
            seen, host_seen = {}, {}
            for client, peer in peers.items():
                tried = [f"{ip}:{TCP_PORT}" for server in servers if server != client for ip in targets[server]]
                seen[client] = peer.ask(probe=tried)["seen"]
                peer.ask(udp=[t.replace(f":{TCP_PORT}", f":{UDP_PORT}") for t in tried])
            # this machine itself: at the engines' sandboxes' addresses, and where slirp4netns would forward
            for target in (docker, podman, "127.0.0.1", *host_addresses()):
                host_seen[target] = host_connects(target)
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                    udp.sendto(b"leak", (target, UDP_PORT))
            time.sleep(1)
            received = {name: peers[name].ask(received=True)["bytes"] for name in servers}
            # the way out still works: the host's service at the gateway, and replies to a sandbox's UDP
            out = {name: peer.ask(probe=[f"{_gateway_for(peer)}:{host_port}"])["seen"] for name, peer in peers.items()}
            replies = {name: peer.ask(udp_echo=f"{_gateway_for(peer)}:{echo_port}") for name, peer in peers.items()}
    finally:
        for peer in peers.values():
            peer.close()
    reached = [f"{client} -> {target}" for client, results in seen.items() for target, r in results.items()
               if r == "ok"]
    reached += [f"this machine -> {target}" for target, r in host_seen.items() if r == "ok"]
    assert (reached, received) == ([], {"docker": 0, "podman": 0, "bwrap": 0}), (seen, host_seen)
    assert all(list(r.values()) == ["ok"] for r in out.values()), out
    assert all(r.get("reply") == "echo:ping" for r in replies.values()), replies


def _gateway_for(peer: Peer) -> str:
    """Where a sandbox finds this machine's services: its gateway, or for bwrap (whose gateway is this
    machine's loopback, refused) this machine's address on its way out."""
    if peer.gateway != SLIRP_GATEWAY:
        return peer.gateway
    return subprocess.run(["ip", "-4", "-o", "route", "get", "1.1.1.1"], capture_output=True, text=True,
                          check=True).stdout.split(" src ")[1].split()[0]


@contextlib.contextmanager
def forwarding(subnet: str):
    """Docker sets the host's FORWARD policy to DROP, and Podman's bridges (netavark) count on it being
    ACCEPT for traffic inside an internal network: a sandbox could not reach the registries proxy on
    a host that runs both engines. Let that network's own traffic through while the test runs."""
    drop = subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True).stdout.startswith(
        "-P FORWARD DROP")
    rule = ["FORWARD", "-s", subnet, "-d", subnet, "-j", "ACCEPT"]
    if drop:
        subprocess.run(["iptables", "-I", *rule], check=True)
    try:
        yield
    finally:
        if drop:
            subprocess.run(["iptables", "-D", *rule], check=True)


def test_registries_mode_reaches_the_proxy_and_nothing_else(rootful):
    px = proxy.ensure()
    subnet = engine.api().inspect_network(px.network_id)["IPAM"]["Config"][0]["Subnet"]

    async def body(made):
        sb = await _started(made, limits=SandboxLimits(network="registries"))
        assert sb.isolated and sb.info()["network"]["proxy"].startswith("http://insandbox-proxy-")
        # the proxy refuses a host off its list by itself (403), so this needs no way out of the machine
        r = await sb.run("python3 - <<'EOF'\nimport os, socket, urllib.parse\n"
                         "u = urllib.parse.urlparse(os.environ['https_proxy'])\n"
                         "s = socket.create_connection((u.hostname, u.port), 5)\n"
                         "s.sendall(b'CONNECT example.com:443 HTTP/1.1\\r\\nHost: example.com:443\\r\\n\\r\\n')\n"
                         "print(s.recv(100).split(b'\\r\\n')[0].decode())\nEOF")
        assert " 403 " in r.output, r.output
        gateway = subnet.rsplit(".", 1)[0] + ".1"  # the host's address on the internal network
        await sb.write_file("/tmp/probe.py", PROBE.encode())
        assert "reached" not in (await sb.run(f"python3 /tmp/probe.py {gateway}:22")).output
    with forwarding(subnet):
        run(body)


def test_recycling_puts_back_the_image_and_the_engines_own_files(rootful):
    async def body(made):
        sb = await _started(made, limits=SandboxLimits(network="none"), recyclable=True)
        assert sb.recyclable, sb.not_recyclable
        await sb.run("echo sample > /tmp/left; rm /etc/mtab; echo x >> /etc/passwd; mkdir /opt/new; export FOO=1")
        done = await sb.recycle()
        assert done["use"] == 2
        r = await sb.run("ls /tmp/left /opt/new 2>&1 | grep -c 'No such'; readlink /etc/mtab; tail -1 /etc/passwd; "
                         "echo FOO=$FOO; grep -c sandbox /etc/hosts; echo x >> /run/.containerenv")
        lines = r.output.splitlines()
        assert lines[:2] == ["2", "/proc/mounts"] and lines[2] != "x" and lines[3:5] == ["FOO=", "1"], r.output
        assert "Read-only file system" in r.output, r.output
    run(body)


def test_fork_and_clean(rootful):
    async def body(made):
        sb = await _started(made, limits=SandboxLimits(network="none"))
        await sb.run("echo kept > /testbed/file.txt; export KEPT=yes")
        snap = await sb.snapshot()
        copy = await snap.start_copy()
        made.append(copy)
        assert (await copy.run("cat /testbed/file.txt; echo $KEPT")).output.split() == ["kept", "yes"]
        await copy.close()
        await snap.remove()
    run(body)
    api = engine.api()
    gone = api.create_container(IMAGE, command=["true"], labels={LABEL: "1", LABEL_OWNER: f"{os.uname().nodename}:"
                                                                                       "999999999:1"})["Id"]
    alive = api.create_container(IMAGE, command=["true"], labels={LABEL: "1", LABEL_OWNER: owner_label()})["Id"]
    try:
        removed = {item.id for item in DockerSandbox.clean()}
        assert gone in removed and alive not in removed
    finally:
        for cid in (gone, alive):
            with contextlib.suppress(Exception):
                api.remove_container(cid, force=True)


# ---------------------------------------------------------------------- rootless
def test_rootless_podman_refuses_the_limits_it_cannot_set(rootless, scripted, tmp_path):
    host = engine.podman_host()
    assert host["security"]["rootless"]
    controllers = set(host.get("cgroupControllers") or ()) if host.get("cgroupVersion") == "v2" else set()
    if {"memory", "cpu", "pids"} <= controllers:  # delegated: the limits hold
        async def body(made):
            sb = await _started(made, limits=SandboxLimits(memory="256m", pids=64, network="none"))
            return (await sb.run("cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max")).output.split()
        assert run(body) == [str(256 * 1024 ** 2), "64"]
        return
    with pytest.raises(SetupError) as e:
        asyncio.run(DockerSandbox.prepare(SandboxSpec(image=IMAGE)))
    assert "rootless Podman" in str(e.value) and "--memory none --cpus 0 --pids-limit 0" in str(e.value), e.value
    srv = scripted({"name": "m", "turns": [{"tool": "execute_bash", "args": {"command": "echo ran"}},
                                           {"tool": "submit", "args": {}}]})
    args = ["run", "t", "--model", "m", "--base-url", srv.url, "-q", "--json"]
    refused = cli(*args, "--out", str(tmp_path / "a"), env={"DOCKER_HOST": rootless.host})
    assert refused.returncode != 0 and "rootless Podman" in refused.stderr, refused.stderr
    ran = cli(*args, "--out", str(tmp_path / "b"), "--memory", "none", "--cpus", "0", "--pids-limit", "0",
              env={"DOCKER_HOST": rootless.host})
    assert ran.returncode == 0, ran.stderr
    assert json.loads((tmp_path / "b" / "trajectory.json").read_text())["exit_reason"] == "submitted"


def test_rootless_podman_without_those_limits(rootless, tmp_path):
    async def body(made):
        a = await _started(made, limits=NO_LIMITS, recyclable=True)
        b = await _started(made, limits=NO_LIMITS)
        assert a.isolated and b.isolated  # set by this root process in the rootless user's namespaces
        assert not a.recyclable and "not mounted where this process sees it" in a.not_recyclable
        assert (await a.run("id -u")).output.strip() == "0"  # root in the sandbox, the user outside
        assert "refused" in (await a.run("echo x >> /run/.containerenv 2>/dev/null || echo refused")).output
        await a.write_file("/tmp/listen.py", LISTEN.encode())
        await a.run("nohup python3 /tmp/listen.py >/dev/null 2>&1 & sleep 1")
        address = next(n["IPAddress"] for n in engine.api().inspect_container(a.container_id)
                       ["NetworkSettings"]["Networks"].values())
        await b.write_file("/tmp/probe.py", PROBE.encode())
        assert "reached" not in (await b.run(f"python3 /tmp/probe.py {address}:9000")).output
        blob = bytes(range(256)) * 4096
        await b.write_file("/testbed/output/blob", blob)
        assert await b.read_file("/testbed/output/blob") == blob
        out = await b.copy_out("/testbed/output", tmp_path / "out")
        assert out.files == ["blob"] and (tmp_path / "out" / "blob").read_bytes() == blob
    run(body)
