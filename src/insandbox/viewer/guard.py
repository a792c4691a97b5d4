"""What wraps every answer of the viewer: the Host check that defeats DNS rebinding, and the security headers.

A web page the user visits can make its own host name resolve to 127.0.0.1 and then read the viewer as if it
were its own origin; the browser still sends the page's name in the Host header, so the viewer answers only
requests that name it: the loopback names, the --host it listens on, the address the connection came in on
and, listening on every interface, this machine's own names. The port is not checked (an ssh or container
port forward changes it; it is never what a rebinding attack controls).

The guard wraps the whole Starlette app, outside its error middleware, so even a 500 gets the headers.
"""
from __future__ import annotations

import ipaddress
import re
import socket
from typing import Optional, Union

# A produced file is untrusted: whatever is opened from /raw runs in a sandbox with an opaque origin (no
# cookies, no storage, no access to the viewer's pages) and may load only the viewer's own URLs, fetch nothing.
RAW_CSP = ("sandbox allow-scripts; default-src 'self' data: blob: 'unsafe-inline' 'unsafe-eval'; connect-src 'none'; "
           "form-action 'none'; base-uri 'none'; frame-ancestors 'self'")
PAGE_CSP = ("default-src 'self'; img-src 'self' data:; media-src 'self'; frame-src 'self'; "
            "style-src 'self' 'unsafe-inline'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
            "form-action 'self'; frame-ancestors 'self'")
# Added to every answer that lacks them (a raw file keeps its own CSP). No Referer: a link in a produced
# page must not tell another site which file of which run was open.
HEADERS = ((b"content-security-policy", PAGE_CSP.encode()), (b"x-content-type-options", b"nosniff"),
           (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"SAMEORIGIN"))

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})
# host, or [IPv6], then an optional port; nothing that could carry a path, user or second authority
_HOST = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9._-]+))(?::[0-9]{1,5})?")


def _ip(text: str) -> Optional[Union[ipaddress.IPv4Address, ipaddress.IPv6Address]]:
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:  # a dual-stack socket's IPv4 client
        return addr.ipv4_mapped
    return addr


def host_of(header: str) -> Optional[str]:
    """The host name of a Host header, lower case, without brackets or port; None when it is not one."""
    m = _HOST.fullmatch(header)
    if m is None:
        return None
    if m["v6"] is not None:
        return m["v6"].lower() if isinstance(_ip(m["v6"]), ipaddress.IPv6Address) else None
    return m["name"].lower()


def allowed_names(host: str) -> frozenset[str]:
    """The host names the viewer listening on `host` answers to (besides the address each connection came in on)."""
    names = set(LOOPBACK_NAMES)
    given = host.strip("[]").lower()
    if given:
        names.add(given)
    if given in WILDCARDS:  # every interface: this machine's names too, as someone on the network types them
        for name in (socket.gethostname(), socket.getfqdn()):
            if name:
                names.add(name.lower())
    return frozenset(names)


class Guard:
    """An ASGI wrapper: refuses a request whose Host is not the viewer's (400, with the page CSP) and adds the
    security headers to every answer that lacks them."""

    def __init__(self, app, host: str = "127.0.0.1"):
        self.app = app
        self.names = allowed_names(host)
        self.ips = frozenset(a for a in map(_ip, self.names) if a is not None)

    def allows(self, scope) -> bool:
        hosts = [v for k, v in scope.get("headers", ()) if k.lower() == b"host"]
        if len(hosts) != 1:
            return False
        name = host_of(hosts[0].decode("latin-1"))
        if name is None:
            return False
        if name in self.names:
            return True
        addr = _ip(name)
        if addr is None:
            return False
        local = (scope.get("server") or (None,))[0]
        # an address literal cannot be rebound: fine if it is one of ours or the one this connection reached
        return addr in self.ips or (local is not None and addr == _ip(str(local)))

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        if not self.allows(scope):
            if scope["type"] == "websocket":
                return await send({"type": "websocket.close", "code": 1008})
            body = b"refused: this viewer answers only to localhost, 127.0.0.1, [::1] and the --host it listens on\n"
            await send({"type": "http.response.start", "status": 400, "headers": [
                (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                *HEADERS]})
            return await send({"type": "http.response.body", "body": body})

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", ())}
                missing = [(k, v) for k, v in HEADERS if k not in present]
                if missing:
                    message = {**message, "headers": [*message.get("headers", ()), *missing]}
            await send(message)

        await self.app(scope, receive, send_with_headers)
