"""Network modes, on the real engine: bridge (full egress), none, registries (PyPI and Debian only,
through the allow-list proxy) and host. The host's loopback services are out of reach in every mode
but host; in registries mode nothing of this machine is reachable at all, and the proxy refuses
every host but the registries (these tests reach PyPI and Debian through it)."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from insandbox.sandbox import SandboxLimits
from insandbox.sandbox.docker import proxy
from tests.helpers import cli
from tests.sandbox.network_peer import LISTENERS, PING, PROBE, SEND_UDP, TCP_PORT, UDP_ECHO, UDP_PORT


@contextlib.contextmanager
def tcp_server(host: str):
    """A server on this machine that greets every connection with b"hello"; yields its port."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, 0))
    srv.listen(16)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"hello")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        srv.close()


def gateway(network: str) -> str:
    """The network's gateway: as the engine says, or (the default bridge, whose IPAM names none when the
    engine chose it) the address of its bridge on this machine."""
    info = json.loads(subprocess.run(["docker", "network", "inspect", network], capture_output=True, text=True,
                                     check=True).stdout)[0]
    said = next((c["Gateway"] for c in info["IPAM"]["Config"] or () if c.get("Gateway")), None)
    if said:
        return said
    bridge = (info.get("Options") or {}).get("com.docker.network.bridge.name") or f"br-{info['Id'][:12]}"
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", bridge], capture_output=True, text=True,
                         check=True).stdout
    return out.split()[3].split("/")[0]


def host_addresses() -> list[str]:
    """This machine's own IPv4 addresses (eth0 and every bridge), loopback aside."""
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    return sorted({line.split()[3].split("/")[0] for line in out.splitlines()} - {"127.0.0.1"})


async def probe(sandbox_factory, network: str, targets: list[str]) -> dict:
    sb = await sandbox_factory(limits=SandboxLimits(network=network))
    try:
        await sb.write_file("/tmp/probe.py", PROBE.encode())
        res = await sb.exec(["python3", "/tmp/probe.py", *targets], timeout=60)
        assert res.exit_code == 0, res.stderr
        return json.loads(res.stdout)
    finally:
        await sb.close()


def test_host_services_are_out_of_reach_in_every_mode_but_host(sandbox_factory, run_async):
    proxy.ensure()  # the proxy's networks exist, so their gateways can be named too
    with tcp_server("127.0.0.1") as lo, tcp_server("0.0.0.0") as anywhere:
        loopback = [f"127.0.0.1:{lo}", f"{gateway('bridge')}:{lo}"]
        everywhere = [f"{ip}:{anywhere}" for ip in host_addresses()]
        assert f"{gateway('bridge')}:{anywhere}" in everywhere

        async def main():
            return await asyncio.gather(*(probe(sandbox_factory, mode, loopback + everywhere)
                                          for mode in ("bridge", "none", "registries", "host")))

        bridge, none, registries, host = run_async(main())
    for mode, seen in (("bridge", bridge), ("none", none), ("registries", registries)):
        for target in loopback:
            assert seen[target] != "ok", (mode, seen)
    assert all(seen != "ok" for seen in none.values()), none
    # registries: no way out, and none to this machine either, whatever it listens on (bridge, being
    # full egress, reaches a service listening on every address of the host, at the bridge's gateway)
    assert all(seen != "ok" for seen in registries.values()), registries
    assert host[f"127.0.0.1:{lo}"] == "ok", host


@pytest.mark.network
def test_registries_mode_reaches_pypi_and_debian_and_nothing_else(sandbox_factory, run_async):
    pypi = socket.gethostbyname("pypi.org")  # as this machine sees it

    async def main():
        sb = await sandbox_factory(limits=SandboxLimits(network="registries"))
        results = {}
        for name, cmd in {
            "pip": "cd /tmp && pip download --no-deps --no-cache-dir -q -d dl six && ls dl",
            "apt": "apt-get update -o Acquire::IndexTargets::deb::Packages::DefaultEnabled=false 2>&1 | tail -3",
            "debian_http": "curl -sS -o /dev/null -w '%{http_code}' http://deb.debian.org/debian/dists/bookworm/Release",
            "example_https": "curl -sS -o /dev/null -m 10 https://example.com 2>&1",
            "example_http": "curl -sS -m 10 http://example.com/ -w ' %{http_code}'",
            "gateway": f"curl -sS -o /dev/null -m 10 -w '%{{http_code}}' http://{gateway('bridge')}:8888/",
            "other_port": "curl -sS -o /dev/null -m 10 https://pypi.org:8443/ 2>&1",
            "http_other_port": "curl -sS -o /dev/null -m 10 -w '%{http_code}' http://deb.debian.org:8080/",
            "no_proxy": f"curl -sS -o /dev/null -m 5 --noproxy '*' --resolve pypi.org:443:{pypi} https://pypi.org 2>&1",
            "dns": "RES_OPTIONS='timeout:1 attempts:1' getent hosts pypi.org || echo no answer",
        }.items():
            results[name] = (await sb.run(cmd, timeout=120)).output
        results["env"] = (await sb.exec(["env"])).stdout
        await sb.close()
        return sb, results

    sb, out = run_async(main())
    px = sb.info()["network"]
    assert px["proxy"].startswith("http://insandbox-proxy-") and "https://pypi.org" in px["allowed"], px
    assert "six-" in out["pip"] and out["pip"].strip().endswith(".whl"), out["pip"]
    assert "Err:" not in out["apt"] and "Reading package lists" in out["apt"], out["apt"]
    assert out["debian_http"] == "200", out
    # what the proxy refuses, it refuses with 403 Filtered (HTTPS: the CONNECT fails)
    assert "CONNECT tunnel failed, response 403" in out["example_https"], out
    assert "Filtered" in out["example_http"] and out["example_http"].endswith(" 403"), out
    assert out["gateway"] == "403", out
    assert "CONNECT tunnel failed, response 403" in out["other_port"], out
    assert out["http_other_port"] == "403", out
    # around the proxy there is nothing: no route, no names
    assert "Failed to connect to pypi.org port 443" in out["no_proxy"], out
    assert out["dns"].strip() == "no answer", out
    assert f"https_proxy={px['proxy']}" in out["env"] and "no_proxy=localhost" in out["env"]


def _scripted_probe_run(scripted, tmp_path: Path, network: str, command: str):
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": command}}, {"tool": "submit"}]})
    r = cli("run", "probe", "--model", "m", "--base-url", srv.url, "--out", str(tmp_path),
            "--network", network, "-q", "--json")
    assert r.returncode == 0, r.stderr
    traj = json.loads((tmp_path / "trajectory.json").read_text())
    return r, traj["steps"][0]["tool_calls"][0]["output"], traj


def test_host_mode_reaches_loopback_and_is_warned_about(scripted, tmp_path, docker_image):
    with tcp_server("127.0.0.1") as lo:
        r, seen, _ = _scripted_probe_run(scripted, tmp_path, "host",
                                         f"python3 -c \"import socket; print(socket.create_connection("
                                         f"('127.0.0.1', {lo}), timeout=3).recv(5))\"")
    assert "b'hello'" in seen, seen
    assert "warning: --network host gives the sandbox this machine's network" in r.stderr


@pytest.mark.network
def test_registries_mode_from_the_command_line(scripted, tmp_path, docker_image):
    r, seen, traj = _scripted_probe_run(scripted, tmp_path, "registries",
                                        "curl -sS -o /dev/null -w '%{http_code}\\n' https://pypi.org/simple/six/; "
                                        "curl -sS https://example.com 2>&1")
    assert "warning" not in r.stderr
    assert seen.startswith("200") and "response 403" in seen, seen
    assert traj["config"]["network"] == "registries"


ENSURE = ("import sys\n"
          "from insandbox.sandbox.docker import proxy\n"
          "eps = [*proxy.allowed_endpoints(), proxy.Endpoint('https', sys.argv[1], 443)]\n"
          "print(proxy.ensure(endpoints=eps).name)\n")


def test_the_proxy_is_made_once_under_concurrency_and_again_when_it_stopped(docker_image):
    """Three processes ask at once for a proxy nobody has made yet (a list of its own): one is
    made, all get it; stopped, it is made again on the next look."""
    host = f"concurrency-{uuid.uuid4().hex[:8]}.invalid"
    label = f"label={proxy.LABEL_PROXY}=proxy"
    try:
        procs = [subprocess.Popen([sys.executable, "-c", ENSURE, host], stdout=subprocess.PIPE, text=True)
                 for _ in range(3)]
        names = {p.communicate(timeout=120)[0].strip() for p in procs}
        assert all(p.returncode == 0 for p in procs) and len(names) == 1, names
        name = names.pop()
        ours = [line for line in subprocess.run(["docker", "ps", "-a", "--filter", label, "--format",
                                                 "{{.Names}}"], capture_output=True, text=True).stdout.split()
                if line == name]
        assert ours == [name]
        first = _inspect(name, "{{.Id}}")
        subprocess.run(["docker", "stop", "-t", "0", name], capture_output=True, check=True)
        again = subprocess.run([sys.executable, "-c", ENSURE, host], capture_output=True, text=True, timeout=120)
        assert again.stdout.strip() == name, again.stderr
        assert _inspect(name, "{{.State.Running}}") == "true" and _inspect(name, "{{.Id}}") != first
    finally:
        for c in subprocess.run(["docker", "ps", "-aq", "--filter", label], capture_output=True,
                                text=True).stdout.split():
            if host in _inspect(c, f'{{{{index .Config.Labels "{proxy.LABEL_ALLOWED}"}}}}'):
                subprocess.run(["docker", "rm", "-f", c], capture_output=True)


def _inspect(container: str, field: str) -> str:
    return subprocess.run(["docker", "inspect", "-f", field, container], capture_output=True, text=True).stdout.strip()


def test_clean_leaves_a_proxy_just_used_and_lists_it_with_all(sandbox_factory, run_async):
    async def use():
        sb = await sandbox_factory(limits=SandboxLimits(network="registries"))
        await sb.close()
        return sb.info()["network"]["proxy"]

    name = run_async(use()).removeprefix("http://").split(":")[0]
    r = cli("clean", "--dry-run")
    assert r.returncode == 0 and name not in r.stdout and proxy.INTERNAL_NETWORK not in r.stdout, r.stdout
    r = cli("clean", "--all", "--dry-run")
    assert r.returncode == 0, r.stderr
    for item in (name, proxy.INTERNAL_NETWORK, proxy.EGRESS_NETWORK):
        assert f"would remove {item} " in r.stdout, r.stdout


# ---------------------------------------------------------------------- the allow-list, without an engine
def test_allow_list_follows_this_machines_pip_and_apt(tmp_path):
    pip_conf = tmp_path / "pip.conf"
    pip_conf.write_text("[global]\nindex-url = https://mirror.example/simple\n"
                        "extra-index-url = file:///opt/pypi/simple https://extra.example:8443/simple\n")
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    (apt / "sources.list").write_text("deb [arch=amd64] http://ftp.example.org/debian bookworm main\n"
                                      "# deb http://commented.example/debian bookworm main\n")
    (apt / "sources.list.d" / "extra.sources").write_text(
        "Types: deb\nURIs: http://apt-cache.example:3142/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: https://off.example/debian\nEnabled: no\n")
    (apt / "sources.list.d" / "off.list.disabled").write_text("deb http://disabled.example/ x main\n")
    env = {"PIP_EXTRA_INDEX_URL": "https://env.example/simple", "INSANDBOX_REGISTRIES_ALLOW": "npm.example, "
           "https://git.example:444", "INSANDBOX_DEBIAN_MIRROR": "http://build.example/debian"}
    got = {str(ep) for ep in proxy.allowed_endpoints(env, apt, [pip_conf])}
    assert got == {
        *(f"{s}://{h}" for s in ("http", "https")
          for h in ("pypi.org", "files.pythonhosted.org", "deb.debian.org", "security.debian.org", "npm.example")),
        "https://mirror.example", "https://extra.example:8443", "https://env.example", "http://ftp.example.org",
        "http://apt-cache.example:3142", "http://build.example", "https://git.example:444"}
    conf, allow = proxy.render(proxy.allowed_endpoints(env, apt, [pip_conf]))
    assert "FilterDefaultDeny Yes" in conf and "ConnectPort 443\nConnectPort 444\nConnectPort 8443" in conf
    assert "^pypi\\.org:443$" in allow.splitlines() and "^http://apt-cache\\.example:3142/" in allow.splitlines()
    assert "^http://deb\\.debian\\.org(:80)?/" in allow.splitlines()
    with pytest.raises(ValueError, match="not a host name"):
        proxy.allowed_endpoints({"INSANDBOX_REGISTRIES_ALLOW": "bad_host!"}, apt, [])


def test_clean_keeps_a_proxy_that_is_or_was_just_in_use():
    assert proxy.idle_reason(users=1, last_join_s=None, everything=False) == ""
    assert proxy.idle_reason(users=0, last_join_s=30, everything=False) == ""
    assert "no sandbox for 10 minutes" in proxy.idle_reason(users=0, last_join_s=None, everything=False)
    assert "no sandbox" in proxy.idle_reason(users=0, last_join_s=proxy.IDLE_GRACE_S + 1, everything=False)
    assert proxy.idle_reason(users=3, last_join_s=1, everything=True) == "--all"


# ---------------------------------------------------------------------- sandbox to sandbox
SEND_UDP_AND_BROADCAST = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
for target in (sys.argv[1], "255.255.255.255"):
    try:
        s.sendto(b"leak", (target, 9001))
    except OSError:
        pass
"""
REVERSE_DNS = r"""
import socket, sys
socket.setdefaulttimeout(2)
try:
    print(socket.gethostbyaddr(sys.argv[1]))
except OSError:
    print("no answer")
"""
HOG = r"""
import os, socket, time
host, port = os.environ["http_proxy"].split("//")[1].split(":")
held, refused = [], 0
for _ in range(700):
    try:
        s = socket.create_connection((host, int(port)), timeout=2)
        s.sendall(b"CONNECT pypi.org:443 HTTP/1.1\r\n")  # never finished
        held.append(s)
    except OSError:
        refused += 1
print(len(held), refused, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("mode", ["bridge", "registries"])
def test_sandboxes_cannot_reach_each_other(sandbox_factory, run_async, mode):
    """Two sandboxes of one mode side by side: neither reaches the other's listener (TCP or UDP, by
    address, by broadcast) or learns its name from the engine's DNS."""
    async def main():
        a = await sandbox_factory(limits=SandboxLimits(network=mode))
        b = await sandbox_factory(limits=SandboxLimits(network=mode))
        await a.write_file("/tmp/listen.py", LISTENERS.encode())
        await a.run("nohup python3 /tmp/listen.py >/dev/null 2>&1 & sleep 1")
        own = (await a.run("python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', 9000), 3); "
                           "print(s.recv(5))\"")).output
        address = subprocess.run(["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}"
                                  "{{end}}", a.name], capture_output=True, text=True).stdout.strip()
        await b.write_file("/tmp/probe.py", PROBE.encode())
        seen = json.loads((await b.exec(["python3", "/tmp/probe.py", f"{address}:9000"], timeout=60)).stdout)
        await b.write_file("/tmp/udp.py", SEND_UDP_AND_BROADCAST.encode())
        await b.write_file("/tmp/rdns.py", REVERSE_DNS.encode())
        await b.run(f"python3 /tmp/udp.py {address}; sleep 1")
        udp = (await a.run("cat /tmp/udp 2>/dev/null | wc -c")).output.strip()
        names = (await b.run(f"RES_OPTIONS='timeout:1 attempts:1' getent hosts {a.name} || echo no answer; "
                             f"python3 /tmp/rdns.py {address}", timeout=60)).output
        return own, address, seen, udp, names, b.info()

    own, address, seen, udp, names, info = run_async(main())
    assert "hello" in own and address, (own, address)  # the listener works, from inside its own sandbox
    assert seen[f"{address}:9000"] != "ok", seen
    assert udp == "0", udp
    assert names.split("\n")[0].strip() == "no answer" and "insandbox" not in names, names
    assert info.get("isolated"), info


def test_one_sandbox_cannot_starve_the_registries_proxy(sandbox_factory, run_async):
    """One sandbox opens hundreds of half-sent connections to the shared proxy; another sandbox's
    requests through it are still answered (here with the proxy's own 403 for a host off the list,
    which needs no outside network), and the first holds at most its share."""
    async def main():
        a = await sandbox_factory(limits=SandboxLimits(network="registries"))
        b = await sandbox_factory(limits=SandboxLimits(network="registries"))
        await a.write_file("/tmp/hog.py", HOG.encode())
        await a.run("nohup python3 /tmp/hog.py > /tmp/hog.out 2>&1 & sleep 8; cat /tmp/hog.out", timeout=60)
        held = (await a.run("cat /tmp/hog.out")).output.split()
        answers = [(await b.run("curl -sS -m 20 -o /dev/null -w '%{http_code}' http://example.com/", timeout=60)).output
                   for _ in range(5)]
        return held, answers

    held, answers = run_async(main())
    assert held and int(held[0]) <= 32 and int(held[1]) >= 600, held
    assert answers == ["403"] * 5, answers


def test_the_registries_proxy_serves_its_sandboxes_only(sandbox_factory, run_async):
    """Anything else that reaches the proxy's address on its egress network (this machine's processes,
    so a bwrap sandbox's slirp4netns, or another engine's NAT) is refused: it could otherwise hold the
    proxy's every slot, which the sandboxes' own packet filter caps only on their side."""
    from insandbox.sandbox.docker import engine

    async def main():
        sb = await sandbox_factory(limits=SandboxLimits(network="registries"))
        return (await sb.run("curl -sS -m 20 -o /dev/null -w '%{http_code}' http://example.com/", timeout=60)).output

    assert run_async(main()) == "403"  # the sandbox is served (the proxy's own refusal of a host off the list)
    api = engine.api()
    px = proxy.ensure()
    info = api.inspect_container(px.name)
    egress = info["NetworkSettings"]["Networks"][proxy.EGRESS_NETWORK]["IPAddress"]
    with socket.create_connection((egress, proxy.PORT), timeout=10) as s:
        s.settimeout(10)
        s.sendall(b"GET http://example.com/ HTTP/1.0\r\nHost: example.com\r\n\r\n")
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := s.recv(4096):
                answer += chunk
    assert b"Filtered" not in answer and b" 403 Filtered" not in answer, answer[:200]  # never served
    assert answer == b"" or b"403 Access denied" in answer or b"Unauthorized" in answer, answer[:200]


# ---------------------------------------------------------------------- into a sandbox
@contextlib.contextmanager
def udp_echo():
    """A UDP socket on every address of this machine that answers each datagram; yields its port."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", 0))

    def echo() -> None:
        with contextlib.suppress(OSError):
            while True:
                data, peer = s.recvfrom(100)
                s.sendto(b"echo:" + data, peer)

    threading.Thread(target=echo, daemon=True).start()
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


def host_connects(address: str, port: int = TCP_PORT) -> str:
    try:
        with socket.create_connection((address, port), timeout=3) as s:
            return "ok" if s.recv(5) == b"hello" else "connected, no greeting"
    except OSError as e:
        return repr(e)


def pings(*addresses: str, netns: str = "") -> dict:
    """ICMP echo requests from this machine (or from the network namespace named): {address: replied?}."""
    argv = ["ip", "netns", "exec", netns] if netns else []
    out = subprocess.run([*argv, sys.executable, "-c", PING, *addresses], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_nothing_opens_a_connection_into_a_bridge_sandbox(sandbox_factory, run_async, runtime):
    """insandbox never connects into a sandbox (its channel is a unix socket or the engine's attach
    stream), so nothing new gets in: not from this machine either, whose processes, slirp4netns's
    connections and other engines' masqueraded sandboxes all arrive from the bridge's gateway. TCP,
    UDP and ICMP echo from this machine to the sandbox's address fail; what the sandbox opens itself
    gets its replies (TCP and UDP to this machine's services at the gateway)."""
    with tcp_server("0.0.0.0") as host_tcp, udp_echo() as host_udp:
        async def main():
            sb = await sandbox_factory(limits=SandboxLimits(network="bridge", runtime=runtime))
            await sb.write_file("/tmp/listen.py", LISTENERS.encode())
            await sb.run("nohup python3 /tmp/listen.py >/dev/null 2>&1 & sleep 1")
            own = (await sb.run("python3 -c \"import socket; print(socket.create_connection(('127.0.0.1', "
                                f"{TCP_PORT}), 3).recv(5))\"")).output
            nets = await asyncio.to_thread(lambda: subprocess.run(
                ["docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", sb.name],
                capture_output=True, text=True).stdout)
            address, gw = next((n["IPAddress"], n["Gateway"]) for n in json.loads(nets).values())
            into = await asyncio.to_thread(host_connects, address)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                udp.sendto(b"leak", (address, UDP_PORT))
            pinged = (await asyncio.to_thread(pings, address))[address]
            await asyncio.sleep(1)
            udp_in = (await sb.run("cat /tmp/udp 2>/dev/null | wc -c")).output.strip()
            await sb.write_file("/tmp/probe.py", PROBE.encode())
            await sb.write_file("/tmp/udp_echo.py", UDP_ECHO.encode())
            out = json.loads((await sb.exec(["python3", "/tmp/probe.py", f"{gw}:{host_tcp}"])).stdout)
            reply = (await sb.exec(["python3", "/tmp/udp_echo.py", f"{gw}:{host_udp}"])).stdout.strip()
            return own, into, udp_in, pinged, out, reply, sb.isolated

        own, into, udp_in, pinged, out, reply, isolated = run_async(main())
    assert "hello" in own and isolated, own  # the listeners work, from inside the sandbox
    assert (into, udp_in, pinged) == ("TimeoutError('timed out')", "0", False), (into, udp_in, pinged)
    assert list(out.values()) == ["ok"] and reply == "echo:ping", (out, reply)


# ---------------------------------------------------------------------- the rules themselves, IPv6 included
# answers each datagram to port 9002 of each address given, from that address (as the sandbox's conntrack expects)
UDP_ECHO_SERVER = r"""
import selectors, socket, sys
sel = selectors.DefaultSelector()
for address in sys.argv[1:]:
    s = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((address, 9002))
    sel.register(s, selectors.EVENT_READ)
while True:
    for key, _ in sel.select():
        d, peer = key.fileobj.recvfrom(100)
        key.fileobj.sendto(b"echo:" + d, peer)
"""


def _in(netns: str, *argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", netns, *argv], capture_output=True, text=True, timeout=60, **kw)


@contextlib.contextmanager
def sandbox_and_gateway_namespaces():
    """Two network namespaces joined by a veth pair, IPv4 and IPv6 (the engine's bridge here has no IPv6):
    the sandbox's (10.213.0.2, fd00:213::2) and its gateway's (10.213.0.1, fd00:213::1, and a neighbour's
    10.213.0.3), which also holds addresses off the link that stand for the internet (198.51.100.1,
    2001:db8:1::1). Yields the two namespaces' names; servers started in them stop at the end."""
    tag = uuid.uuid4().hex[:8]
    sb, gw = f"insandbox-sb-{tag}", f"insandbox-gw-{tag}"
    made = []
    try:
        for ns in (sb, gw):
            subprocess.run(["ip", "netns", "add", ns], check=True)
            made.append(ns)
            # addresses usable at once (no duplicate address detection), link-local ones included
            _in(ns, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0",
                check=True)
        subprocess.run(["ip", "link", "add", "v0", "netns", sb, "type", "veth", "peer", "name", "v1", "netns", gw],
                       check=True)
        for ns, dev, addrs in ((sb, "v0", ["10.213.0.2/24", "fd00:213::2/64"]),
                               (gw, "v1", ["10.213.0.1/24", "10.213.0.3/24", "fd00:213::1/64"]),
                               (gw, "lo", ["198.51.100.1/32", "2001:db8:1::1/128"])):
            for addr in addrs:
                subprocess.run(["ip", "-n", ns, "addr", "add", addr, "dev", dev, *(["nodad"] if ":" in addr else [])],
                               check=True)
            subprocess.run(["ip", "-n", ns, "link", "set", dev, "up"], check=True)
        subprocess.run(["ip", "-n", sb, "link", "set", "lo", "up"], check=True)
        subprocess.run(["ip", "-n", sb, "route", "add", "default", "via", "10.213.0.1"], check=True)
        subprocess.run(["ip", "-n", sb, "-6", "route", "add", "default", "via", "fd00:213::1"], check=True)
        yield sb, gw
    finally:
        for ns in made:  # their processes were ours, stopped by the test
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _wait_in_namespace(pid: int, netns: str) -> None:
    """Until the process started by `ip netns exec` has entered the namespace."""
    want = os.stat(f"/run/netns/{netns}").st_ino
    deadline = time.monotonic() + 20
    while os.stat(f"/proc/{pid}/ns/net").st_ino != want:
        assert time.monotonic() < deadline, f"process {pid} never entered {netns}"
        time.sleep(0.05)


def _link_local(netns: str, dev: str) -> str:
    out = subprocess.run(["ip", "-n", netns, "-6", "-o", "addr", "show", "dev", dev, "scope", "link"],
                         capture_output=True, text=True, check=True).stdout
    return out.split()[3].split("/")[0]


@pytest.mark.parametrize("with_ipv6", [True, False])
def test_bridge_rules_let_nothing_new_in_from_the_gateway_or_anywhere(tmp_path, with_ipv6):
    """bridge's rules, loaded by netfilter.apply into a namespace of their own beside a gateway's: nothing
    opens a connection or sends a datagram or an echo request into the sandbox, over IPv4, IPv6 or
    link-local IPv6, from the gateway, a neighbour or the internet; the sandbox reaches the gateway and
    the internet, and its UDP gets replies. On a network without IPv6, no IPv6 at all."""
    from insandbox.sandbox.docker import netfilter

    with sandbox_and_gateway_namespaces() as (sb, gw):
        received = tmp_path / "udp"
        servers = [subprocess.Popen(["ip", "netns", "exec", sb, sys.executable, "-c", LISTENERS, "::", str(received)]),
                   subprocess.Popen(["ip", "netns", "exec", gw, sys.executable, "-c", LISTENERS, "::",
                                     str(tmp_path / "gw-udp")]),
                   subprocess.Popen(["ip", "netns", "exec", gw, sys.executable, "-c", UDP_ECHO_SERVER, "10.213.0.1",
                                     "198.51.100.1", "fd00:213::1", "2001:db8:1::1"])]
        try:
            _wait_in_namespace(servers[0].pid, sb)  # never the rules into this machine's own namespace
            ipv6 = netfilter.Subnet("fd00:213::/64", "fd00:213::1") if with_ipv6 else None
            where = netfilter.Placement(servers[0].pid, netfilter.Subnet("10.213.0.0/24", "10.213.0.1"), ipv6)
            netfilter.apply(where, netfilter.bridge_rules(where))
            time.sleep(1)  # the servers listen
            own = _in(sb, sys.executable, "-c", PROBE, "127.0.0.1:9000", "::1:9000").stdout
            sandbox = ["10.213.0.2", "fd00:213::2", f"{_link_local(sb, 'v0')}%v1"]
            into = [f"{a}:{TCP_PORT}" for a in sandbox]
            sources = {"gateway": "", "neighbour": "10.213.0.3", "internet": "198.51.100.1"}
            seen = {}
            for name, source in sources.items():
                if source:  # the gateway's namespace, its connections leaving from another of its addresses
                    subprocess.run(["ip", "-n", gw, "route", "replace", "10.213.0.2/32", "dev", "v1", "src", source],
                                   check=True)
                seen[name] = json.loads(_in(gw, sys.executable, "-c", PROBE, *into).stdout)
                _in(gw, sys.executable, "-c", SEND_UDP, *(f"{a}:{UDP_PORT}" for a in sandbox), check=True)
            subprocess.run(["ip", "-n", gw, "route", "del", "10.213.0.2/32"], check=True)
            pinged = pings(*sandbox, netns=gw)
            time.sleep(1)
            out = json.loads(_in(sb, sys.executable, "-c", PROBE, f"10.213.0.1:{TCP_PORT}", f"198.51.100.1:{TCP_PORT}",
                                 f"fd00:213::1:{TCP_PORT}", f"2001:db8:1::1:{TCP_PORT}",
                                 f"10.213.0.3:{TCP_PORT}").stdout)
            replies = {t: _in(sb, sys.executable, "-c", UDP_ECHO, f"{t}:9002").stdout.strip()
                       for t in ("10.213.0.1", "198.51.100.1", "fd00:213::1", "2001:db8:1::1")}
        finally:
            for p in servers:
                p.kill()
                p.wait()
    assert json.loads(own) == {"127.0.0.1:9000": "ok", "::1:9000": "ok"}, own  # loopback: the sandbox's own
    assert all(r != "ok" for results in seen.values() for r in results.values()), seen
    assert not received.exists() or received.read_bytes() == b"", received.read_bytes()
    assert not any(pinged.values()), pinged
    v6 = with_ipv6  # on a network without IPv6, none at all
    assert {t: r == "ok" for t, r in out.items()} == {
        f"10.213.0.1:{TCP_PORT}": True, f"198.51.100.1:{TCP_PORT}": True, f"fd00:213::1:{TCP_PORT}": v6,
        f"2001:db8:1::1:{TCP_PORT}": v6, f"10.213.0.3:{TCP_PORT}": False}, out  # a neighbour: refused
    assert {t: r == "echo:ping" for t, r in replies.items()} == {
        "10.213.0.1": True, "198.51.100.1": True, "fd00:213::1": v6, "2001:db8:1::1": v6}, replies
