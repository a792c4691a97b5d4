"""The viewer's Starlette app over one root folder, and `serve` for `insandbox view`."""
from __future__ import annotations

import datetime as _dt
import errno
import socket
from pathlib import Path
from typing import Optional

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

from ..core.errors import ConfigError
from ..core.units import is_loopback_host as is_loopback
from ..sandbox.copyback import human_size
from .files import Listings, NotInside, language_of, shown, url_path, url_query
from .guard import Guard
from .index import Index
from .routes import routes
from .training import RolloutFiles
from .trajectories import TrajectoryCache, UnreadableTrajectory

HERE = Path(__file__).parent


class Viewer:
    """What the handlers share: the index of the root folder, caches, the templates."""

    def __init__(self, root: Path):
        self.index = Index(root)
        self.trajectories = TrajectoryCache()
        self.listings = Listings()
        self.rollouts = RolloutFiles()
        self.templates = Environment(loader=FileSystemLoader(HERE / "templates"),
                                     autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
        self.templates.filters.update(num=_num, secs=_secs, usd=_usd, score=_score, mode=_mode, when=_when,
                                      size=human_size, shown=shown, fig=_fig, url_path=url_path, url_query=url_query)
        self.templates.globals.update(lang_of=language_of)


def _num(n) -> str:
    return "" if n is None else f"{n:,}"


def _secs(s) -> str:
    if s is None:
        return ""
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 120:
        return f"{s:.1f} s"
    return f"{s / 60:.1f} min"


def _usd(c) -> str:
    if c is None:
        return "?"
    return "$0" if c == 0 else f"${c:.4f}" if c < 1 else f"${c:,.2f}"


def _score(s) -> str:
    return "" if s is None else f"{s:g}"


def _fig(v) -> str:
    """A training figure: a number to 4 significant digits, '–' for a gap."""
    return "–" if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) else f"{v:.4g}"


def _mode(m) -> str:
    return "plain" if m == "llm" else (m or "")


def _when(t) -> str:
    if not t:
        return ""
    return _dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def make_app(root: Path, host: str = "127.0.0.1") -> Guard:
    """The viewer over `root`, answering only requests that name it (`host`: the address it listens on)."""
    viewer = Viewer(Path(root))

    async def not_found(request: Request, exc: HTTPException) -> Response:
        html = viewer.templates.get_template("error.html").render(request=request, status=exc.status_code,
                                                                   detail=exc.detail, root=viewer.index.root)
        return Response(html, status_code=exc.status_code, media_type="text/html; charset=utf-8")

    async def unreadable(request: Request, exc: UnreadableTrajectory) -> Response:
        return await not_found(request, HTTPException(422, str(exc)))

    app = Starlette(routes=routes(), exception_handlers={HTTPException: not_found, UnreadableTrajectory: unreadable})
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.state.viewer = viewer
    return Guard(app, host)


class CannotListen(ConfigError, OSError):
    """The address cannot be listened on (the port is in use, the host is not this machine's)."""


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, made here so that a port in use is a clear error before anything starts."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as e:
        raise CannotListen(f"cannot listen on {host}: {e.strerror or e}") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise CannotListen(f"port {port} is in use on {host} (choose another --port)") from None
        raise CannotListen(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def server(root: Path, sock: socket.socket, log_level: str = "warning", host: Optional[str] = None):
    """A uvicorn server of the viewer on an already bound socket (`.run(sockets=[sock])`, or in a thread);
    `host` is the --host it was bound for (by default the socket's own address)."""
    import uvicorn

    app = make_app(root, sock.getsockname()[0] if host is None else host)
    config = uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=1, lifespan="off",
                            access_log=False)
    return uvicorn.Server(config)


def url_of(host: str, port: int, path: str = "/") -> str:
    if host in ("0.0.0.0", "", "::"):  # every interface: the loopback address is one of them
        host = "::1" if host == "::" else "127.0.0.1"
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{path}"


def serve(root: Path, host: str = "127.0.0.1", port: int = 8765, open_browser: bool = True,
          on_ready: Optional[callable] = None) -> None:
    sock = bind(host, port)
    port = sock.getsockname()[1]
    srv = server(root, sock, host=host)
    url = url_of(host, port)
    if on_ready:
        on_ready(url)
    if open_browser:
        import threading
        import webbrowser

        threading.Timer(0.5, lambda: webbrowser.open(url)).start()
    srv.run(sockets=[sock])


__all__ = ["NotInside", "CannotListen", "Guard", "Viewer", "bind", "is_loopback", "make_app", "serve", "server",
           "url_of"]
