"""One sandbox of any backend and engine, driven from a test over this process's stdin and stdout, so
that sandboxes of different engines (whose client is one per process) run side by side:

    python -m tests.sandbox.network_peer BACKEND NETWORK      (the engine: DOCKER_HOST, as for insandbox)

It starts the sandbox and prints {"address": its IPv4 address, "gateway": its way out}, the engine's
word for Docker and Podman, slirp4netns's fixed ones for bwrap. Then one line of JSON back per line read:

    {"listen": true}             start a TCP server (port 9000, greets with b"hello") and a UDP listener
                                 (port 9001, keeps what arrives) inside: {"own": what 127.0.0.1:9000 said}
    {"probe": ["ip:port", ...]}  TCP connections from inside: {"seen": {target: "ok" | the error}}
    {"udp": ["ip:port", ...]}    a datagram to each from inside: {}
    {"received": true}           {"bytes": how many the UDP listener got so far}
    {"udp_echo": "ip:port"}      b"ping" sent there from inside: {"reply": what came back, or the error}

At the end of its input it closes the sandbox.
"""
from __future__ import annotations

import asyncio
import json
import sys

from insandbox.sandbox import SandboxLimits, SandboxSpec, create_sandbox

TCP_PORT, UDP_PORT = 9000, 9001
SLIRP_ADDRESS, SLIRP_GATEWAY = "10.0.2.100", "10.0.2.2"  # slirp4netns --configure's, always

# a TCP server greeting with b"hello" and a UDP listener keeping what arrives in /tmp/udp (or argv[2]), on
# every IPv4 address, or with argv[1] "::" on every address of both families
LISTENERS = r"""
import socket, sys, threading
family = socket.AF_INET6 if sys.argv[1:2] == ["::"] else socket.AF_INET
def bound(kind, port):
    s = socket.socket(family, kind)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
    return s
def tcp():
    s = bound(socket.SOCK_STREAM, 9000)
    s.listen(8)
    while True:
        c, _ = s.accept()
        c.sendall(b"hello")
        c.close()
def udp():
    s = bound(socket.SOCK_DGRAM, 9001)
    while True:
        d, _ = s.recvfrom(100)
        with open(sys.argv[2] if len(sys.argv) > 2 else "/tmp/udp", "ab") as f:
            f.write(d)
threading.Thread(target=udp, daemon=True).start()
tcp()
"""
# connect to each "ip:port" given (all at once), say what happened, as JSON {target: "ok" | error}
PROBE = r"""
import json, sys
from concurrent.futures import ThreadPoolExecutor
from socket import create_connection

def attempt(target):
    ip, port = target.rsplit(":", 1)
    try:
        with create_connection((ip, int(port)), timeout=3) as s:
            return "ok" if s.recv(5) == b"hello" else "connected, no greeting"
    except OSError as e:
        return repr(e)

with ThreadPoolExecutor(len(sys.argv)) as pool:
    print(json.dumps(dict(zip(sys.argv[1:], pool.map(attempt, sys.argv[1:])))))
"""
# a datagram to each "ip:port" given (IPv4 or IPv6)
SEND_UDP = r"""
import socket, sys
for target in sys.argv[1:]:
    ip, port = target.rsplit(":", 1)
    try:
        family, kind, proto, _, address = socket.getaddrinfo(ip.strip("[]"), int(port), type=socket.SOCK_DGRAM)[0]
        socket.socket(family, kind, proto).sendto(b"leak", address)
    except OSError:
        pass
"""
# b"ping" to "ip:port", and what came back (or the error)
UDP_ECHO = r"""
import socket, sys
ip, port = sys.argv[1].rsplit(":", 1)
try:
    family, kind, proto, _, address = socket.getaddrinfo(ip.strip("[]"), int(port), type=socket.SOCK_DGRAM)[0]
    s = socket.socket(family, kind, proto)
    s.settimeout(3)
    s.sendto(b"ping", address)
    print(s.recv(100).decode())
except OSError as e:
    print(repr(e))
"""
# an ICMP echo request to each address given (a raw socket: needs CAP_NET_RAW), as JSON {address: replied?}
PING = r"""
import json, os, socket, struct, sys, time
def checksum(data):
    data += b"\0" * (len(data) % 2)
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    total = (total >> 16) + (total & 0xFFFF)
    return ~(total + (total >> 16)) & 0xFFFF
def ping(address):
    ident = os.getpid() & 0xFFFF
    v6 = ":" in address
    kind, reply = (128, 129) if v6 else (8, 0)
    body = struct.pack("!BBHHH", kind, 0, 0, ident, 1) + b"insandbox"
    if not v6:  # the kernel computes ICMPv6's
        body = body[:2] + struct.pack("!H", checksum(body)) + body[4:]
    family, proto = (socket.AF_INET6, socket.IPPROTO_ICMPV6) if v6 else (socket.AF_INET, socket.IPPROTO_ICMP)
    target = socket.getaddrinfo(address, None, family, socket.SOCK_DGRAM)[0][4]  # (the scope of a link-local one)
    with socket.socket(family, socket.SOCK_RAW, proto) as s:
        s.settimeout(0.5)
        s.sendto(body, target)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                data, source = s.recvfrom(1500)
            except socket.timeout:
                continue
            icmp = data if v6 else data[(data[0] & 0x0F) * 4:]
            if icmp[0] == reply and struct.unpack("!H", icmp[4:6])[0] == ident:
                return True
    return False
print(json.dumps({a: ping(a) for a in sys.argv[1:]}))
"""


def _addresses(sb) -> dict:
    if sb.info().get("backend") == "bwrap":
        return {"address": SLIRP_ADDRESS, "gateway": SLIRP_GATEWAY}
    from insandbox.sandbox.docker import engine

    nets = engine.api().inspect_container(sb.container_id)["NetworkSettings"]["Networks"]
    return next({"address": n["IPAddress"], "gateway": n["Gateway"]} for n in nets.values())


async def _answer(sb, request: dict) -> dict:
    if request.get("listen"):
        await sb.write_file("/tmp/listen.py", LISTENERS.encode())
        await sb.run("nohup python3 /tmp/listen.py >/dev/null 2>&1 & sleep 1")
        own = await sb.exec(["python3", "-c", "import socket; print(socket.create_connection(('127.0.0.1', 9000), "
                                              "3).recv(5).decode())"])
        return {"own": own.stdout.strip()}
    if "probe" in request:
        await sb.write_file("/tmp/probe.py", PROBE.encode())
        res = await sb.exec(["python3", "/tmp/probe.py", *request["probe"]], timeout=60)
        return {"seen": json.loads(res.stdout)}
    if "udp" in request:
        await sb.write_file("/tmp/udp.py", SEND_UDP.encode())
        await sb.exec(["python3", "/tmp/udp.py", *request["udp"]])
        return {}
    if "udp_echo" in request:
        await sb.write_file("/tmp/udp_echo.py", UDP_ECHO.encode())
        return {"reply": (await sb.exec(["python3", "/tmp/udp_echo.py", request["udp_echo"]])).stdout.strip()}
    if request.get("received"):
        return {"bytes": int((await sb.run("cat /tmp/udp 2>/dev/null | wc -c")).output.strip())}
    raise ValueError(f"not a request: {request}")


async def main(backend: str, network: str) -> None:
    sb = create_sandbox(SandboxSpec(run_id="peer", limits=SandboxLimits(network=network)), backend)
    try:
        try:
            await sb.start()
        except Exception as e:
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
            return
        print(json.dumps(_addresses(sb)), flush=True)
        while line := await asyncio.to_thread(sys.stdin.readline):
            print(json.dumps(await _answer(sb, json.loads(line))), flush=True)
    finally:
        await sb.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
