"""`insandbox rl build-data` (filled in by the data builder)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def build_data(
    sources: Annotated[list[Path], typer.Option("--sources", help="Source folders (one per source format).")],
    out: Annotated[Path, typer.Option(help="Output folder.")],
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    limit: Annotated[Optional[int], typer.Option(help="Tasks per source at most.")] = None,
) -> None:
    """Build context tasks (material as files in the sandbox) from reading-comprehension data."""
    raise typer.Exit(2)
