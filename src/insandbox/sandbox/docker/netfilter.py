"""Keeping sandboxes on a shared network apart: packet filter rules in each sandbox's own network
namespace, set from the host before the sandbox runs anything.

On the engine's default bridge every container can reach every other (the engine's inter-container
setting is global to the machine), and on the registries network every sandbox can reach every
other and ask the engine's DNS for their names. A network per sandbox would cost a bridge, its
iptables rules and an address range each (the engine has 31 ranges by default). Instead each
sandbox's namespace gets a few rules of its own (iptables-restore through nsenter, ~10 ms of CPU at
start): the rules live and die with the namespace, and the sandbox, which has no CAP_NET_ADMIN,
cannot change them.

Inbound, in every mode: loopback and the replies to the sandbox's own connections (conntrack's
ESTABLISHED, RELATED: TCP, UDP answers, ICMP errors), nothing new, whatever its source. The source
says nothing: another engine's sandbox reaches this one through that engine's masquerade, a bwrap
sandbox through slirp4netns (a process of this machine), and both arrive from this network's gateway,
as this machine's own processes do. Nothing of insandbox's connects into a sandbox (its channel is a
unix socket or the engine's attach stream; the registries proxy only answers), so none needs letting in.

- bridge: out to the internet and to the host (the bridge's gateway) as before; nothing to another
  address of the bridge; no broadcast or multicast; IPv6 only where the network has it, on the same
  terms (neighbour discovery aside, link-local neither way).
- registries: only the proxy's port, with at most PROXY_CONNECTIONS connections open at once (so one
  sandbox cannot take the proxy's every slot from the others); not the engine's DNS (the proxy's
  name is in /etc/hosts); nothing else.

The receiving end is the guarantee, so no sandbox's outbound rules name other engines' networks:
their ranges are not known here (Podman's is configurable, another engine's networks come and go),
and what such rules would shield beyond the sandboxes, which refuse anyway, are other containers of
this machine, as reachable as any address of the network outside.
"""
from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlparse

from ..base import SandboxError

PROXY_CONNECTIONS = 32  # connections a sandbox may hold open to the registries proxy at once
ENGINE_DNS = "127.0.0.11"


@dataclass(frozen=True)
class Subnet:
    """One address family of the network a sandbox is on."""

    cidr: str
    gateway: str = ""


@dataclass(frozen=True)
class Placement:
    """What the rules need: the sandbox's namespace and its network, as the engine reports them."""

    pid: int
    ipv4: Optional[Subnet] = None
    ipv6: Optional[Subnet] = None
    proxy: Optional[tuple[str, int]] = None  # registries: (address, port)


def placement(inspect: dict, proxy: Optional[tuple[str, int]] = None) -> Placement:
    """From the engine's inspect of the started container: its process, and its network's ranges as
    its own address and prefix give them (the container is on one network in the modes ruled here)."""
    pid = int((inspect.get("State") or {}).get("Pid") or 0)
    if pid <= 0:
        raise SandboxError("the sandbox's container has no process to set its network rules in")
    v4 = v6 = None
    for ep in ((inspect.get("NetworkSettings") or {}).get("Networks") or {}).values():
        if ep.get("IPAddress"):
            v4 = Subnet(str(ipaddress.ip_interface(f"{ep['IPAddress']}/{ep.get('IPPrefixLen') or 32}").network),
                        ep.get("Gateway") or "")
        if ep.get("GlobalIPv6Address"):
            own = f"{ep['GlobalIPv6Address']}/{ep.get('GlobalIPv6PrefixLen') or 128}"
            v6 = Subnet(str(ipaddress.ip_interface(own).network), ep.get("IPv6Gateway") or "")
    return Placement(pid, v4, v6, proxy)


def own_address(inspect: dict) -> Optional[str]:
    for ep in ((inspect.get("NetworkSettings") or {}).get("Networks") or {}).values():
        if ep.get("IPAddress"):
            return ep["IPAddress"]
    return None


def bridge_rules(p: Placement) -> tuple[str, str]:
    """(IPv4, IPv6) iptables-restore input for a sandbox on a shared bridge with full egress.

    Inbound: loopback and the replies to the sandbox's own connections (conntrack), nothing new from
    anywhere, the gateway included: other engines' sandboxes (Podman's, through its masquerade) and
    bwrap's (through slirp4netns, a process of this machine) arrive from the gateway's address.
    Outbound: everything but the rest of its own network (the gateway aside), broadcast and multicast."""
    v4 = ["-A INPUT -i lo -j ACCEPT", "-A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
          "-A INPUT -j DROP", "-A OUTPUT -o lo -j ACCEPT"]
    if p.ipv4:
        if p.ipv4.gateway:
            v4 += [f"-A OUTPUT -d {p.ipv4.gateway}/32 -j ACCEPT"]
        v4 += [f"-A OUTPUT -d {p.ipv4.cidr} -j REJECT --reject-with icmp-admin-prohibited"]
    v4 += ["-A OUTPUT -d 224.0.0.0/4 -j DROP", "-A OUTPUT -d 255.255.255.255/32 -j DROP"]
    v6 = ["-A INPUT -i lo -j ACCEPT", "-A OUTPUT -o lo -j ACCEPT"]
    if p.ipv6:
        # neighbour discovery: without it no IPv6 packet finds its next hop (conntrack does not track it)
        v6 += [f"-A {chain} -p ipv6-icmp --icmpv6-type {t} -j ACCEPT" for chain in ("INPUT", "OUTPUT")
               for t in ("router-solicitation", "router-advertisement", "neighbour-solicitation",
                         "neighbour-advertisement")]
        v6 += ["-A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT", "-A INPUT -j DROP"]
        if p.ipv6.gateway:
            v6 += [f"-A OUTPUT -d {p.ipv6.gateway}/128 -j ACCEPT"]
        v6 += [f"-A OUTPUT -d {p.ipv6.cidr} -j REJECT", "-A OUTPUT -d fe80::/10 -j REJECT",
               "-A OUTPUT -d ff00::/8 -j DROP"]
    else:  # no IPv6 on this network: link-local addresses would still reach the neighbours
        v6 += ["-A INPUT -j DROP", "-A OUTPUT -j REJECT"]
    return _table(v4), _table(v6)


def registries_rules(p: Placement) -> tuple[str, str]:
    """(IPv4, IPv6) for a sandbox that may reach the registries proxy and nothing else."""
    if p.proxy is None:
        raise SandboxError("the registries proxy's address is unknown")
    address, port = p.proxy
    v4 = ["-A INPUT -i lo -j ACCEPT",
          f"-A INPUT -s {address}/32 -p tcp --sport {port} -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
          "-A INPUT -j DROP",
          f"-A OUTPUT -d {ENGINE_DNS}/32 -j REJECT",
          "-A OUTPUT -o lo -j ACCEPT",
          f"-A OUTPUT -d {address}/32 -p tcp --dport {port} -m conntrack --ctstate NEW -m connlimit --connlimit-above "
          f"{PROXY_CONNECTIONS} --connlimit-mask 32 --connlimit-daddr -j REJECT --reject-with tcp-reset",
          f"-A OUTPUT -d {address}/32 -p tcp --dport {port} -j ACCEPT",
          "-A OUTPUT -j REJECT --reject-with icmp-admin-prohibited"]
    v6 = ["-A INPUT -i lo -j ACCEPT", "-A INPUT -j DROP", "-A OUTPUT -o lo -j ACCEPT", "-A OUTPUT -j REJECT"]
    return _table(v4), _table(v6)


def _table(rules: list[str]) -> str:
    return "\n".join(["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD DROP [0:0]", ":OUTPUT ACCEPT [0:0]",
                      *rules, "COMMIT", ""])


def why_unavailable() -> Optional[str]:
    """Why this process cannot set a sandbox's rules (None: it can)."""
    if os.geteuid() != 0 and not _own_rootless_podman():
        return "setting a sandbox's network rules needs root on the engine's host (or rootless Podman of this user)"
    for tool in ("nsenter", "iptables-restore", "ip6tables-restore"):
        if _which(tool) is None:
            return f"{tool} is not installed"
    return None


def _which(tool: str) -> Optional[str]:
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")  # not on a user's PATH


def _own_rootless_podman() -> bool:
    """The engine is rootless Podman run by this user: its containers' network namespaces belong to a
    user namespace this user owns, where it may set their rules (the sandboxes, without CAP_NET_ADMIN,
    still may not)."""
    from . import engine

    try:
        path = urlparse(engine.docker_host()).path
        return (os.stat(path).st_uid == os.getuid() and engine.is_podman()
                and bool((engine.podman_host().get("security") or {}).get("rootless")))
    except Exception:
        return False


def apply(p: Placement, rules: tuple[str, str]) -> None:
    """Load the rules into the sandbox's network namespace (raises SandboxError when they do not load:
    the sandbox must not run without them)."""
    why = why_unavailable()
    if why:
        raise SandboxError(f"cannot keep the sandbox apart from the others: {why}")
    # not root: rootless Podman's, entered through its user namespace, where this user holds the rights
    namespaces = [f"--user=/proc/{p.pid}/ns/user"] if os.geteuid() != 0 else []
    for tool, text in (("iptables-restore", rules[0]), ("ip6tables-restore", rules[1])):
        res = subprocess.run([_which("nsenter"), *namespaces, f"--net=/proc/{p.pid}/ns/net", "--", _which(tool)],
                             input=text.encode(), capture_output=True, timeout=30)
        if res.returncode != 0:
            err = res.stderr.decode(errors="replace").strip().splitlines()
            raise SandboxError(f"cannot keep the sandbox apart from the others: {tool} failed in its network "
                               f"namespace ({err[-1] if err else res.returncode})")
