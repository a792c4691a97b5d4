"""The sandbox service's HTTP API (Starlette, served by uvicorn on a unix socket or a loopback port).

    GET  /v1/status                      what it holds: ready, handed out, starting, failed; its configuration
    POST /v1/claim                       {client, config} -> {lease, info}; 409 naming the first difference
    POST /v1/leases/{id}/call            {op, args} -> {result} or {error: {type, message}}
    POST /v1/leases/{id}/release         the sandbox is removed (or reset and offered again: --recycle)
    POST /v1/renew                       {leases} -> {gone}: the client is alive

On TCP every request carries `Authorization: Bearer TOKEN` (the token file: protocol.py); a unix
socket is reached only by its owner (mode 0600).
"""
from __future__ import annotations

import asyncio
import hmac
import json
import os
import secrets
import signal
from pathlib import Path
from typing import Optional

from ..base import SandboxError
from . import protocol
from .service import Sandboxes, call

MAX_BODY = 256 << 20  # a write_file of a large input file, base64


def make_app(sandboxes: Sandboxes, token: Optional[str]):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    def denied(request: Request) -> Optional[JSONResponse]:
        if token is None:
            return None
        given = request.headers.get("authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return None
        return JSONResponse({"error": {"type": "Unauthorized", "message": "a wrong or missing token"}}, 401)

    async def body(request: Request) -> dict:
        raw = await request.body()
        if len(raw) > MAX_BODY:
            raise ValueError("request too large")
        data = json.loads(raw or b"{}")
        if not isinstance(data, dict):
            raise ValueError("a JSON object is expected")
        return data

    async def status(request: Request):
        return denied(request) or JSONResponse(sandboxes.status())

    async def claim(request: Request):
        if (refused := denied(request)) is not None:
            return refused
        data = await body(request)
        why = protocol.difference(sandboxes.config, data.get("config") or {})
        if why:
            return JSONResponse({"error": {"type": "SetupError", "message": f"the sandbox service at this URL holds "
                                                                            f"other sandboxes: {why}"}}, 409)
        try:
            lease = await sandboxes.claim(str(data.get("client") or "?"))
        except SandboxError as e:
            return JSONResponse({"error": {"type": type(e).__name__, "message": str(e)}}, 503)
        return JSONResponse({"lease": lease.id, "info": lease.sandbox.info()})

    async def op(request: Request):
        if (refused := denied(request)) is not None:
            return refused
        data = await body(request)
        try:
            result = await call(sandboxes, request.path_params["lease"], str(data.get("op")), data.get("args") or {})
        except KeyError:
            return JSONResponse({"error": {"type": "SandboxError", "message": "this sandbox's lease is over (it "
                                                                              "expired or was given back)"}}, 404)
        except Exception as e:  # the sandbox's own failure: the client raises the same class
            return JSONResponse({"error": {"type": type(e).__name__, "message": str(e)}})
        return JSONResponse({"result": result})

    async def release(request: Request):
        if (refused := denied(request)) is not None:
            return refused
        sandboxes.release(request.path_params["lease"])
        return JSONResponse({"released": True})

    async def renew(request: Request):
        if (refused := denied(request)) is not None:
            return refused
        data = await body(request)
        return JSONResponse({"gone": sandboxes.renew([str(i) for i in data.get("leases") or []])})

    api = protocol.API
    return Starlette(routes=[Route(f"{api}/status", status), Route(f"{api}/claim", claim, methods=["POST"]),
                             Route(f"{api}/leases/{{lease}}/call", op, methods=["POST"]),
                             Route(f"{api}/leases/{{lease}}/release", release, methods=["POST"]),
                             Route(f"{api}/renew", renew, methods=["POST"])])


async def serve(sandboxes: Sandboxes, socket: Optional[Path] = None, port: Optional[int] = None,
                host: str = "127.0.0.1", on_ready=lambda url: None) -> None:
    """Serve until Ctrl-C or SIGTERM; then every sandbox is removed."""
    import uvicorn

    token = None
    if port is not None:
        token = secrets.token_urlsafe(32)
        path = protocol.token_file(host, port)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token)
        url = f"http://{host}:{port}"
    else:
        socket = Path(socket or protocol.default_socket())
        socket.parent.mkdir(parents=True, exist_ok=True)
        if socket.exists():
            socket.unlink()
        url = f"unix://{socket}"
    config = uvicorn.Config(make_app(sandboxes, token), host=host, port=port or 0,
                            uds=str(socket) if port is None else None, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # ours below: the sandboxes are removed first
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    sandboxes.open()
    serving = asyncio.ensure_future(server.serve())
    try:
        while not server.started and not serving.done():
            await asyncio.sleep(0.05)
        if serving.done():
            serving.result()  # a port in use: its error
        if socket is not None:
            os.chmod(socket, 0o600)
        on_ready(url)
        await stop.wait()
    finally:
        server.should_exit = True
        await sandboxes.close()
        await asyncio.gather(serving, return_exceptions=True)
        if port is not None:
            protocol.token_file(host, port).unlink(missing_ok=True)
        elif socket is not None:
            socket.unlink(missing_ok=True)
