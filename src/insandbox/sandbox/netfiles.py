"""What /etc/hosts, /etc/resolv.conf and /etc/hostname hold in a sandbox, by network mode: insandbox
writes its own (every backend mounts them read-only), mirroring what the Docker engine would write.

The loopback names and the sandbox's own name; for `bridge`, the host's name servers without the
loopback ones (which a sandbox on its own network cannot reach), or Google's public ones when none is
left; for a network the user names, the engine's own resolver (127.0.0.11); for `registries` no name
server (the proxy resolves names) and the proxy's address under its name; for `none` no name server;
for `host`, the host's own files.
"""
from __future__ import annotations

import ipaddress
import socket
from pathlib import Path
from typing import Optional

HOSTNAME = "sandbox"
FILES = {"hosts": "/etc/hosts", "resolv.conf": "/etc/resolv.conf", "hostname": "/etc/hostname"}
FALLBACK_NAMESERVERS = ("8.8.8.8", "8.8.4.4")  # the engine's own fallback
ENGINE_RESOLVER = "127.0.0.11"
LOOPBACK_HOSTS = ("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n"
                  "ff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n")


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def host_resolv_conf() -> str:
    """The host's resolver settings as a container on a bridge can use them (the engine's rules)."""
    text = _read("/etc/resolv.conf")
    servers = [line.split()[1] for line in text.splitlines() if line.split()[:1] == ["nameserver"]
               and len(line.split()) > 1]
    if servers and all(_is_loopback(s) for s in servers) and Path("/run/systemd/resolve/resolv.conf").is_file():
        text = _read("/run/systemd/resolve/resolv.conf")  # systemd-resolved's stub: its upstream servers
    kept, has_server = [], False
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["nameserver"]:
            if len(words) < 2 or _is_loopback(words[1]):
                continue
            has_server = True
        kept.append(line)
    if not has_server:
        kept += [f"nameserver {s}" for s in FALLBACK_NAMESERVERS]
    return "\n".join(kept) + "\n"


def search_and_options() -> list[str]:
    return [line for line in _read("/etc/resolv.conf").splitlines() if line.split()[:1] in (["search"], ["options"])]


def contents(network: str, builtin: bool, proxy: Optional[tuple[str, str]] = None,
             address: Optional[str] = None) -> dict[str, str]:
    """The three files for a network mode. builtin: bridge/none/host/registries (else a network the
    user named); proxy: (address, name) of the registries proxy; address: the sandbox's own."""
    own = f"{address or '127.0.1.1'}\t{HOSTNAME}\n"
    if network == "host":
        return {"hosts": _read("/etc/hosts") or LOOPBACK_HOSTS, "resolv.conf": _read("/etc/resolv.conf"),
                "hostname": socket.gethostname() + "\n"}
    hosts = LOOPBACK_HOSTS + own
    if network == "registries":
        if proxy:
            hosts += f"{proxy[0]}\t{proxy[1]}\n"
        resolv = "# no name server: the registries proxy resolves names\n"
    elif network == "none":
        resolv = "# no network\n"
    elif builtin:
        resolv = host_resolv_conf()
    else:  # a user-defined network: the engine's resolver, which forwards to the host's
        resolv = "\n".join([f"nameserver {ENGINE_RESOLVER}", *search_and_options(), "options ndots:0"]) + "\n"
    return {"hosts": hosts, "resolv.conf": resolv, "hostname": HOSTNAME + "\n"}
