"""`insandbox export atif` and `insandbox import atif`: trajectories in the field's exchange format."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import fail


def export_atif(
    path: Annotated[Path, typer.Argument(help="A run folder, a benchmark's folder (every sample), or RL rollouts "
                                              "(rollouts.jsonl or its folder).", metavar="RUN_DIR")],
    out: Annotated[Optional[Path], typer.Option(help="The file (one trajectory) or folder (several).",
                                                metavar="PATH", show_default="RUN_DIR/atif.json or RUN_DIR/atif/")]
    = None,
) -> None:
    """Write trajectories as ATIF (ATIF-v1.8, the Agent Trajectory Interchange Format)."""
    from ..core.errors import DataError
    from ..formats.atif_files import export_atif as export

    try:
        written = export(path, out)
    except (DataError, OSError) as e:
        fail(str(e), 2 if isinstance(e, DataError) else 1)
    typer.echo(written[0] if len(written) == 1 else f"{len(written)} ATIF files in {written[0].parent}")


def import_atif(
    file: Annotated[Path, typer.Argument(help="An ATIF trajectory (JSON).", metavar="FILE")],
    out: Annotated[Optional[Path], typer.Option(help="The run folder to make.", metavar="DIR",
                                                show_default="runs/atif-<file name>")] = None,
) -> None:
    """Make a run folder from an ATIF trajectory (`insandbox view` shows it)."""
    from ..core.errors import DataError
    from ..formats.atif_files import import_atif as load

    try:
        written = load(file, out or Path("runs") / f"atif-{Path(file).stem}")
    except (DataError, OSError) as e:
        fail(str(e), 2 if isinstance(e, DataError) else 1)
    typer.echo(written.parent)
