"""`insandbox pool serve` and `insandbox pool status`: a sandbox service that outlives a run."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..core import defaults
from .common import fail, finish
from .options import SANDBOX, settings, shared_options

SERVED = tuple(n for n in SANDBOX if n != "pool_url")


@shared_options(*SERVED)
def pool_serve(
    size: Annotated[int, typer.Option(min=1, help="Sandboxes kept ready (each one handed out is replaced).")] = 8,
    port: Annotated[Optional[int], typer.Option(help="Listen on 127.0.0.1:PORT (with a token its clients find "
                                                     "themselves) instead of a unix socket.", metavar="PORT")] = None,
    socket: Annotated[Optional[Path], typer.Option(help="The unix socket.", metavar="PATH",
                                                   show_default="$XDG_RUNTIME_DIR/insandbox-pool.sock")] = None,
    workdir: Annotated[str, typer.Option(help="The sandboxes' working folder (the prompts' working_dir).",
                                         metavar="DIR")] = defaults.WORKDIR,
    recycle: Annotated[bool, typer.Option(help="Reset a sandbox given back and hand it out again (the "
                                               "host-verified reset; refused ones are removed). Off: every "
                                               "client gets a never-used sandbox.")] = False,
    max_uses: Annotated[int, typer.Option(min=1, help="With --recycle: clients one sandbox serves at most.")]
    = defaults.POOL_MAX_USES,
    *, shared: dict,
) -> None:
    """Keep sandboxes of one configuration ready for run, bench and rl rollout (their --pool-url)."""
    import dataclasses
    import logging

    from ..config import ConfigError, validated
    from ..sandbox import SandboxError, backend_class
    from ..sandbox.served import http
    from ..sandbox.served.service import Sandboxes

    logging.basicConfig(level=logging.WARNING, format="insandbox pool: %(message)s")
    try:
        cfg = validated(settings(shared))
    except ConfigError as e:
        fail(str(e))
    spec = dataclasses.replace(cfg.sandbox.sandbox_spec("pool"), workdir=workdir)

    async def serve() -> None:
        await backend_class(cfg.backend).prepare(spec, on_status=lambda t: typer.echo(f"insandbox: {t}", err=True))
        sandboxes = Sandboxes(spec, cfg.backend, size, recycle=recycle, max_uses=max_uses)
        await http.serve(sandboxes, socket=socket, port=port,
                         on_ready=lambda url: typer.echo(f"insandbox: serving {size} sandbox(es) of {cfg.image} at "
                                                         f"{url} (--pool-url {url}); Ctrl-C to stop", err=True))

    finish(lambda: serve(), failed=(SandboxError, OSError))


def pool_status(
    pool_url: Annotated[Optional[str], typer.Option(help="The service [env INSANDBOX_POOL_URL].", metavar="URL",
                                                    show_default="the default unix socket")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the status as JSON.")] = False,
) -> None:
    """Say what a sandbox service holds: ready, handed out, starting, failed."""
    import asyncio
    import json
    import os

    from ..sandbox import SandboxError
    from ..sandbox.served import protocol
    from ..sandbox.served.client import ServiceClient

    url = pool_url or os.environ.get(protocol.ENV_URL) or f"unix://{protocol.default_socket()}"
    try:
        protocol.parse_url(url)
    except ValueError as e:
        fail(str(e))

    async def ask() -> tuple[int, dict]:
        client = ServiceClient(url)
        try:
            return await client.request("GET", "/status")
        finally:
            await client.close()

    try:
        code, data = asyncio.run(ask())
    except SandboxError as e:
        fail(str(e), 1)
    if "error" in data:
        fail(f"{url}: {data['error'].get('message')}", 1)
    if json_out:
        typer.echo(json.dumps(data, indent=1))
        return
    for key in ("ready", "handed_out", "starting", "failed"):
        typer.echo(f"{key.replace('_', ' ')}: {data.get(key)}")
    c = data.get("config") or {}
    typer.echo(f"configuration: {c.get('backend')} {c.get('image')} network {c.get('network')} memory "
               f"{c.get('memory')} cpus {c.get('cpus')} workdir {c.get('workdir')}; recycle {data.get('recycle')}; "
               f"served {data.get('served')}")
    if data.get("last_error"):
        typer.echo(f"last failure: {data['last_error']}")
