"""`--network registries`: sandboxes reach the package registries, through an allow-list proxy, and nothing else.

    sandbox --[insandbox-registries: internal]--> proxy (tinyproxy) --[insandbox-egress]--> PyPI, Debian

- `insandbox-registries` is an `--internal` bridge network whose host side has no address
  (`inhibit_ipv4`): a container on it has no route out and cannot reach this machine either.
  (An internal network alone still reaches every service the host listens to on 0.0.0.0, at its
  gateway address.) Each sandbox's own packet filter (netfilter.py) lets it reach the proxy's port
  and nothing else on that network: not the other sandboxes, not the engine's DNS.
- The proxy container (image insandbox-proxy:<hash of proxy.Dockerfile>) is on both networks.
  Its rules allow "host:443" for HTTPS (CONNECT, to port 443 only) and "http://host/" for plain
  HTTP (port 80), for PyPI, Debian, and whatever index or mirror this machine's own pip and apt
  use; INSANDBOX_REGISTRIES_ALLOW adds more (hosts or URLs, comma or space separated). Anything
  else gets "403 Filtered".
- Sandboxes of the mode get http_proxy, https_proxy (and upper-case forms), which pip, apt,
  curl and requests honour, and no_proxy for loopback; the proxy's name is in their /etc/hosts.
  One sandbox holds at most 32 connections to the proxy at once (its packet filter), so it
  cannot take the proxy's slots from the others.

Shared by every sandbox on this Docker engine: made on first use (`prepare`, or a sandbox's
`start`), one proxy container per allow-list (its name carries a hash of its configuration, so
processes with different lists never fight over one container). Making it is idempotent and
serialised on this host by a lock file; two networks of one name (from hosts not sharing the
lock) resolve to the oldest, for every process alike.

`insandbox clean` removes the proxies and both networks only when they are idle: no container
but a proxy is on the internal network and none joined it in the last 10 minutes (a process
between two episodes, or one that prepared and is loading its model, is not cut off); `clean
--all` removes them regardless, like every sandbox. A process that needs them again makes them
again (a sandbox's `start` checks that they are there, at most every few seconds).
"""
from __future__ import annotations

import configparser
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

from ..base import Leftover, SandboxError, SetupError
from . import engine

MODE = "registries"
PORT = 8888
INTERNAL_NETWORK = "insandbox-registries"
EGRESS_NETWORK = "insandbox-egress"
LABEL_PROXY = "insandbox.proxy"  # "proxy" on proxy containers, "internal"/"egress" on the networks
LABEL_CONFIG = "insandbox.proxy.config"  # hash of the proxy's configuration
LABEL_ALLOWED = "insandbox.proxy.allowed"  # what it lets through, for people reading `docker inspect`
LABEL_CLIENTS = "insandbox.proxy.clients"  # the internal network's range: the only clients it serves
DEFAULT_HOSTS = ("pypi.org", "files.pythonhosted.org", "deb.debian.org", "security.debian.org")
ALLOW_ENV = "INSANDBOX_REGISTRIES_ALLOW"
IDLE_GRACE_S = 600.0  # clean: the proxy stays while a sandbox joined its network this recently
RECHECK_S = 5.0  # start(): look at the proxy again after this long
READY_TIMEOUT_S = 20.0
LOCK_FILE = Path(tempfile.gettempdir()) / "insandbox-proxy.lock"
IMAGE_DIR = Path(__file__).parent / "image"
DOCKERFILE = IMAGE_DIR / "proxy.Dockerfile"
CONF_TEMPLATE = IMAGE_DIR / "tinyproxy.conf"
CONF_DIR = "/etc/tinyproxy"
NO_PROXY = "localhost,127.0.0.1,::1"

Progress = Callable[[str], None]
_HOST = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")
_DEFAULT_PORT = {"http": 80, "https": 443}


# ---------------------------------------------------------------------- what is allowed
@dataclass(frozen=True, order=True)
class Endpoint:
    scheme: str  # http or https
    host: str
    port: int

    def __str__(self) -> str:
        default = _DEFAULT_PORT[self.scheme] == self.port
        return f"{self.scheme}://{self.host}{'' if default else f':{self.port}'}"

    def rule(self) -> str:
        """tinyproxy rule (POSIX ERE over the URL it filters, see tinyproxy.conf)."""
        host = self.host.replace(".", r"\.")
        if self.scheme == "https":
            return f"^{host}:{self.port}$"
        return f"^http://{host}(:80)?/" if self.port == 80 else f"^http://{host}:{self.port}/"


def endpoint_of(url: str) -> Optional[Endpoint]:
    """The endpoint of an http(s) URL, or None (other schemes, file paths, odd host names)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    host = (parts.hostname or "").lower()
    if parts.scheme not in _DEFAULT_PORT or not _HOST.match(host):
        return None
    return Endpoint(parts.scheme, host, port or _DEFAULT_PORT[parts.scheme])


def pip_config_files(environ: Mapping[str, str] = os.environ) -> list[Path]:
    """Where pip reads its configuration, in its own order (global, user, site)."""
    if environ.get("PIP_CONFIG_FILE") == os.devnull:
        return []
    files = [Path(d) / "pip" / "pip.conf" for d in environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":") if d]
    files.append(Path("/etc/pip.conf"))
    home = Path(environ.get("HOME") or Path.home())
    files += [home / ".pip" / "pip.conf", Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf"]
    files.append(Path(sys.prefix) / "pip.conf")
    if environ.get("PIP_CONFIG_FILE"):
        files.append(Path(environ["PIP_CONFIG_FILE"]))
    return files


def pip_index_urls(files: Iterable[Path], environ: Mapping[str, str] = os.environ) -> list[str]:
    """index-url, extra-index-url and find-links of pip's configuration files and environment."""
    urls: list[str] = []
    keys = ("index-url", "extra-index-url", "find-links")
    for path in files:
        parser = configparser.RawConfigParser()
        try:
            parser.read(path)
        except (OSError, configparser.Error):
            continue
        for section in parser.sections():
            urls += [u for key in keys for u in parser.get(section, key, fallback="").split()]
    for key in keys:
        urls += environ.get("PIP_" + key.upper().replace("-", "_"), "").split()
    return urls


def apt_source_urls(etc_apt: Path = Path("/etc/apt")) -> list[str]:
    """The URIs of apt's enabled sources: sources.list and sources.list.d/*.list (one-line format),
    sources.list.d/*.sources (deb822 format)."""
    urls: list[str] = []
    one_line = [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*.list"))]
    for path in one_line:
        with contextlib.suppress(OSError):
            for line in path.read_text(errors="replace").splitlines():
                words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()  # drop [options]
                if len(words) >= 2 and words[0] in ("deb", "deb-src"):
                    urls.append(words[1])
    for path in sorted((etc_apt / "sources.list.d").glob("*.sources")):
        with contextlib.suppress(OSError):
            text = path.read_text(errors="replace")
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line or line[:1].isspace():
                        continue
                    key, value = line.split(":", 1)
                    fields[key.strip().lower()] = value.strip()
                if fields.get("enabled", "yes").lower() not in ("no", "false", "0"):
                    urls += fields.get("uris", "").split()
    return urls


def allowed_endpoints(environ: Mapping[str, str] = os.environ, etc_apt: Path = Path("/etc/apt"),
                      pip_files: Optional[Iterable[Path]] = None, hosts: Iterable[str] = ()) -> list[Endpoint]:
    """PyPI and Debian (HTTP and HTTPS), this machine's pip indexes and apt mirrors, the Debian
    mirror the images are built from, INSANDBOX_REGISTRIES_ALLOW and `hosts` (a bare host: HTTP and HTTPS)."""
    found: set[Endpoint] = set()

    def add_host(host: str) -> None:
        for scheme in ("http", "https"):
            ep = endpoint_of(f"{scheme}://{host}/")
            if ep:
                found.add(ep)

    for host in DEFAULT_HOSTS:
        add_host(host)
    urls = pip_index_urls(pip_config_files(environ) if pip_files is None else pip_files, environ)
    urls += apt_source_urls(etc_apt)
    urls.append(environ.get("INSANDBOX_DEBIAN_MIRROR", ""))
    for url in urls:
        ep = endpoint_of(url)
        if ep:
            found.add(ep)
    for host in hosts:
        if not _HOST.match(host.lower()):
            raise SetupError(f"{host!r} is not a host name")
        add_host(host.lower())
    for item in re.split(r"[,\s]+", environ.get(ALLOW_ENV, "")):
        if "://" in item:
            ep = endpoint_of(item)
            if ep is None:
                raise SetupError(f"{ALLOW_ENV}: {item!r} is not an http(s) URL")
            found.add(ep)
        elif item:
            if not _HOST.match(item.lower()):
                raise SetupError(f"{ALLOW_ENV}: {item!r} is not a host name")
            add_host(item.lower())
    return sorted(found)


def render(endpoints: Iterable[Endpoint]) -> tuple[str, str]:
    """tinyproxy's configuration and its allow-list file for these endpoints."""
    endpoints = sorted(set(endpoints))
    ports = sorted({ep.port for ep in endpoints if ep.scheme == "https"}) or [0]  # 0: no CONNECT at all
    conf = CONF_TEMPLATE.read_text().format(port=PORT, connect_ports="\n".join(f"ConnectPort {p}" for p in ports))
    allow = "".join(f"# {ep}\n{ep.rule()}\n" for ep in endpoints)
    return conf, allow


def image_tag() -> str:
    return "insandbox-proxy:" + hashlib.sha256(DOCKERFILE.read_bytes()).hexdigest()[:12]


@dataclass(frozen=True)
class Proxy:
    """A running proxy, as sandboxes see it."""

    name: str  # the container's name; sandboxes find it under this name in their /etc/hosts
    network_id: str  # the internal network: the sandboxes' network mode
    allowed: tuple[str, ...]
    address: str = ""  # on the internal network: the one place a sandbox of the mode may connect to

    @property
    def url(self) -> str:
        return f"http://{self.name}:{PORT}"

    def env(self) -> dict[str, str]:
        return {"http_proxy": self.url, "https_proxy": self.url, "HTTP_PROXY": self.url, "HTTPS_PROXY": self.url,
                "no_proxy": NO_PROXY, "NO_PROXY": NO_PROXY}

    def info(self) -> dict:
        return {"proxy": self.url, "allowed": list(self.allowed)}


# ---------------------------------------------------------------------- making it
_lock = threading.Lock()
_cache: dict[str, tuple[Proxy, float]] = {}  # config hash -> (proxy, when it was last seen running)


@contextlib.contextmanager
def host_lock() -> Iterator[None]:
    """Serialise making and removing the proxy among the processes of this host."""
    fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o666)  # other users' processes share it
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def build_image(tag: Optional[str] = None, no_cache: bool = False, progress: Progress = lambda line: None) -> str:
    """Build the proxy's image on the sandbox image's Debian base; returns its tag."""
    from . import image

    tag = tag or image_tag()
    base = image.ensure_base(progress)
    ctx = Path(tempfile.mkdtemp(prefix="insandbox-proxy-build-"))
    try:
        shutil.copy(DOCKERFILE, ctx / "Dockerfile")
        progress(f"building {tag} on {base}")
        image.build_context(ctx, tag, base, no_cache, progress)
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    return tag


def ensure(on_status: Progress = lambda text: None, on_progress: Progress = lambda text: None,
           endpoints: Optional[list[Endpoint]] = None) -> Proxy:
    """The running proxy for this machine's allow-list, made (image, networks, container) where
    missing. Blocking: call it through engine.call from async code."""
    endpoints = allowed_endpoints() if endpoints is None else endpoints
    conf, allow = render(endpoints)
    key = hashlib.sha256(f"{image_tag()}\n{conf}\n{allow}".encode()).hexdigest()[:12]
    with _lock:  # one thread of this process looks; the others take its answer
        cached = _cache.get(key)
        if cached and time.monotonic() - cached[1] < RECHECK_S:
            return cached[0]
        with host_lock():
            proxy = _ensure(key, conf, allow, tuple(map(str, endpoints)), on_status, on_progress)
        _cache[key] = (proxy, time.monotonic())
        return proxy


def forget() -> None:
    """Look at the engine again on the next ensure()."""
    with _lock:
        _cache.clear()


def _ensure(key: str, conf: str, allow: str, allowed: tuple[str, ...], on_status: Progress,
            on_progress: Progress) -> Proxy:
    from . import image

    api = engine.api()
    tag = image_tag()
    if not image.image_exists(tag):
        on_status(f"image {tag} not found: building it (once, about 10 s)")
        t0 = time.perf_counter()
        build_image(tag, progress=on_progress)
        on_status(f"built {tag} in {time.perf_counter() - t0:.0f} s")
    egress = _network(api, EGRESS_NETWORK, internal=False)
    internal = _network(api, INTERNAL_NETWORK, internal=True)
    # Only the sandboxes of the mode are its clients: whatever else reaches the proxy's egress address
    # (this machine's processes, so a bwrap sandbox through slirp4netns, another engine's NAT) is refused,
    # or it could hold the proxy's every slot.
    clients = _subnets(internal)
    if not clients:
        raise SandboxError(f"the Docker network {INTERNAL_NETWORK} has no address range to serve")
    conf += "".join(f"Allow {c}\n" for c in clients)
    name = f"insandbox-proxy-{key}"
    for _attempt in (1, 2):
        info = _start(api, name, tag, key, conf, allow, allowed, clients, egress, internal, on_status)
        if _address_of(info, egress) and _address_of(info, internal):
            break
        # said to run but without an address (Podman: its network namespace was lost with the service that
        # made it): made afresh once
        _remove(api, name)
    else:
        held = {k: (v.get("NetworkID"), v.get("IPAddress")) for k, v in
                ((info or {}).get("NetworkSettings", {}).get("Networks") or {}).items()}
        raise SandboxError(f"the registries proxy {name} has no address on {EGRESS_NETWORK} ({egress['Id'][:12]}) or "
                           f"{INTERNAL_NETWORK} ({internal['Id'][:12]}); the engine says it is on {held}")
    _wait_ready(api, name, info, egress)
    return Proxy(name=name, network_id=internal["Id"], allowed=allowed, address=_address_of(info, internal))


def _start(api, name: str, tag: str, key: str, conf: str, allow: str, allowed: tuple[str, ...], clients: list[str],
           egress: dict, internal: dict, on_status: Progress) -> dict:
    """The proxy container, running and on both networks (made, or the one found)."""
    import docker.errors

    from . import archive

    info = _inspect(api, name)
    labels = ((info or {}).get("Config") or {}).get("Labels") or {}
    stale = info is not None and labels.get(LABEL_CLIENTS) != " ".join(clients)
    if info is not None and (stale or not info["State"].get("Running")):
        _remove(api, name)  # stopped (an engine restart without it, a crash), or made for another range: afresh
        info = None
    if info is None:
        try:
            cid = api.create_container(
                tag, name=name, labels={LABEL_PROXY: "proxy", LABEL_CONFIG: key, LABEL_ALLOWED: " ".join(allowed),
                                        LABEL_CLIENTS: " ".join(clients)},
                host_config=api.create_host_config(
                    network_mode=EGRESS_NETWORK, restart_policy={"Name": "unless-stopped"},
                    mem_limit="512m", pids_limit=4096,
                    log_config={"Type": "json-file", "Config": {"max-size": "10m", "max-file": "2"}}),
                networking_config=api.create_networking_config({EGRESS_NETWORK: api.create_endpoint_config()}),
            )["Id"]
        except docker.errors.APIError as e:
            if e.status_code != 409:  # 409: another host made it meanwhile
                raise SandboxError(f"could not create the registries proxy: {e.explanation or e}") from e
        else:
            api.put_archive(cid, CONF_DIR, archive.tar_of_texts({"insandbox.conf": conf.encode(),
                                                                 "allow": allow.encode()}))
            api.connect_container_to_network(cid, internal["Id"], aliases=[name])
            api.start(cid)
            on_status(f"started the registries proxy {name}: it lets through {', '.join(allowed)}")
        info = _inspect(api, name)
        if info is None:
            raise SandboxError(f"the registries proxy {name} vanished while it was being made")
    for net in (egress, internal):
        if _endpoint(info, net) is None:  # a network was made again (clean, or another host): join it
            api.connect_container_to_network(info["Id"], net["Id"], aliases=[name])
            info = _inspect(api, name) or info
    return info


def _inspect(api, name: str) -> Optional[dict]:
    try:
        return api.inspect_container(name)
    except Exception as e:
        if engine.is_not_found(e):
            return None
        raise


def _remove(api, name: str) -> None:
    try:
        api.remove_container(name, force=True, v=True)
    except Exception as e:
        if not engine.is_not_found(e) and "already in progress" not in str(e):
            raise


def _find_network(api, name: str) -> Optional[dict]:
    ours = [n for n in api.networks(names=[name]) if n.get("Name") == name]
    if ours and not any((n.get("Labels") or {}).get(LABEL_PROXY) for n in ours):
        raise SetupError(f"a Docker network named {name!r} exists that insandbox did not make; remove or "
                         "rename it to use --network registries")
    ours = [n for n in ours if (n.get("Labels") or {}).get(LABEL_PROXY)]
    return min(ours, key=lambda n: (n.get("Created", ""), n["Id"])) if ours else None


def _network(api, name: str, internal: bool) -> dict:
    import docker.errors

    found = _find_network(api, name)
    if found is None:
        options = {"com.docker.network.bridge.inhibit_ipv4": "true"} if internal else None
        try:
            api.create_network(name, driver="bridge", internal=internal, options=options, check_duplicate=True,
                               labels={LABEL_PROXY: "internal" if internal else "egress"})
        except docker.errors.APIError as e:
            if e.status_code != 409:
                raise SandboxError(f"could not create the Docker network {name}: {e.explanation or e}") from e
        found = _find_network(api, name)
        if found is None:
            raise SandboxError(f"the Docker network {name} vanished while it was being made")
    if bool(found.get("Internal")) != internal:
        raise SetupError(f"the Docker network {name!r} is {'not ' if internal else ''}internal; remove it "
                         "(insandbox clean --all) so that insandbox makes it again")
    return found


def _wait_ready(api, name: str, info: dict, egress: dict) -> None:
    """Until tinyproxy accepts connections (from this host, at its address on the egress network)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    address = _address_of(info, egress)
    while True:
        if address:
            with contextlib.suppress(OSError), socket.create_connection((address, PORT), timeout=1.0):
                return
        if time.monotonic() > deadline:
            logs = api.logs(name, tail=20).decode(errors="replace").strip()
            raise SandboxError(f"the registries proxy {name} did not answer on {address}:{PORT} within "
                               f"{READY_TIMEOUT_S:.0f} s; its last words:\n{logs}")
        time.sleep(0.05)
        if not address:
            address = _address_of(_inspect(api, name) or info, egress)


def _subnets(net: dict) -> list[str]:
    """The address ranges of a Docker network (as the engine's IPAM gives them)."""
    configs = (net.get("IPAM") or {}).get("Config") or []
    return sorted(c["Subnet"] for c in configs if c.get("Subnet"))


def _endpoint(info: dict, net: dict) -> Optional[dict]:
    """The container's endpoint on this network (Docker names it by id in NetworkID, Podman by name)."""
    return next((n for n in (info["NetworkSettings"].get("Networks") or {}).values()
                 if n.get("NetworkID") in (net["Id"], net.get("Name"))), None)


def _address_of(info: dict, net: dict) -> Optional[str]:
    return (_endpoint(info, net) or {}).get("IPAddress") or None


# ---------------------------------------------------------------------- clean
def idle_reason(users: int, last_join_s: Optional[float], everything: bool) -> str:
    """Why the proxy may be removed ("" to keep it): `users` containers besides proxies are on its
    network, the last of them joined `last_join_s` seconds ago (None: not within the grace)."""
    if everything:
        return "--all"
    if users:
        return ""
    if last_join_s is not None and last_join_s < IDLE_GRACE_S:
        return ""
    return f"shared registries proxy, no sandbox for {IDLE_GRACE_S / 60:.0f} minutes"


def find_leftovers(everything: bool = False, removing: Iterable[str] = ()) -> list[Leftover]:
    """The proxies and their networks, if `clean` may remove them; `removing`: the ids of the
    containers this clean removes (they do not count as users)."""
    api = engine.api()
    proxies = api.containers(all=True, filters={"label": f"{LABEL_PROXY}=proxy"})
    nets = [n for n in api.networks(filters={"label": LABEL_PROXY})]
    if not proxies and not nets:
        return []
    proxy_ids = {c["Id"] for c in proxies}
    gone = proxy_ids | set(removing)
    users, last_join = 0, None
    now = time.time()
    for net in nets:
        if (net.get("Labels") or {}).get(LABEL_PROXY) != "internal":
            continue
        users += sum(c["Id"] not in gone for c in api.containers(all=True, filters={"network": net["Id"]}))
        for ev in api.events(since=int(now - IDLE_GRACE_S), until=int(now), decode=True,
                             filters={"type": "network", "network": net["Id"], "event": "connect"}):
            if (ev.get("Actor", {}).get("Attributes") or {}).get("container") not in gone:
                ago = now - ev.get("timeNano", 0) / 1e9
                last_join = ago if last_join is None else min(last_join, ago)
    reason = idle_reason(users, last_join, everything)
    if not reason:
        return []
    found = [Leftover(id=c["Id"], name=(c.get("Names") or ["?"])[0].lstrip("/"), run_id="",
                      status=c.get("Status", ""), reason=reason) for c in proxies]
    # the internal network first: it cannot go while a container is on it, and then the egress one stays too
    nets.sort(key=lambda n: (n.get("Labels") or {}).get(LABEL_PROXY) != "internal")
    found += [Leftover(id=n["Id"], name=n["Name"], run_id="", status="network", reason=reason) for n in nets]
    return found


def clean(everything: bool = False, dry_run: bool = False, removing: Iterable[str] = ()) -> list[Leftover]:
    """Remove the proxies and their networks when find_leftovers says so; returns what was removed
    (a network a sandbox joined meanwhile stays, and is not listed)."""
    removed = []
    with host_lock():
        items = find_leftovers(everything, removing)
        if dry_run:
            return items
        api = engine.api()
        for item in items:
            try:
                if item.status == "network":
                    api.remove_network(item.id)
                else:
                    api.remove_container(item.id, force=True, v=True)
            except Exception as e:
                if engine.is_not_found(e):
                    continue
                if "active endpoints" in str(e):  # a sandbox joined since we looked: leave it
                    continue
                raise
            removed.append(item)
    forget()
    return removed
