"""`insandbox clean`: what runs left behind."""
from __future__ import annotations

from typing import Annotated

import typer

from ..core import defaults
from .common import fail


def clean(
    all_: Annotated[bool, typer.Option("--all", help="Also remove sandboxes whose owner process is alive (or "
                                                     "unknown): only when no run is in progress.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list what would be removed.")] = False,
    backend: Annotated[str, typer.Option(help="Sandbox backend.", metavar="NAME")] = defaults.BACKEND,
) -> None:
    """Remove sandboxes left behind by processes that are gone (only sandboxes insandbox created)."""
    from ..sandbox import SandboxError, SetupError, backend_class

    try:
        removed = backend_class(backend).clean(everything=all_, dry_run=dry_run)
    except SetupError as e:
        fail(str(e))
    except SandboxError as e:
        fail(str(e), 1)
    for c in removed:
        typer.echo(f"{'would remove' if dry_run else 'removed'} {c.name} (run {c.run_id or '?'}; {c.reason})")
    if not removed:
        typer.echo("nothing to clean")
