"""`insandbox view`: the local web viewer."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import fail


def view(
    path: Annotated[Path, typer.Argument(help="A run folder, a benchmark folder, or a folder of many.")] = Path("runs"),
    host: Annotated[str, typer.Option(help="Address to listen on (anything but loopback lets others on the network "
                                           "read every run).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free one).")] = 8765,
    open_browser: Annotated[bool, typer.Option("--open/--no-open", help="Open the viewer in a browser.")] = True,
) -> None:
    """A local web viewer for runs, benchmarks and the files they produced, updated live while they run."""
    from ..viewer.app import CannotListen, is_loopback, serve

    if not path.is_dir():
        fail(f"{path} is not a folder (give a run folder, a benchmark folder, or a folder of them)")
    if not 0 <= port <= 65535:
        fail(f"--port {port}: give a port from 0 to 65535")
    if not is_loopback(host):
        typer.echo(f"insandbox: warning: listening on {host}: anyone who can reach this address can read every run "
                   f"and file under {path}", err=True)
    try:
        serve(path, host=host, port=port, open_browser=open_browser,
              on_ready=lambda url: typer.echo(f"insandbox view: {url} (showing {path.resolve()}; Ctrl-C to stop)"))
    except CannotListen as e:
        fail(str(e))
    except KeyboardInterrupt:
        pass
