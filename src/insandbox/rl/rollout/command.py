"""`insandbox rl rollout`."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def rollout(
    data: Annotated[Path, typer.Option(help="Task rows (JSONL).")],
    out: Annotated[Path, typer.Option(help="Output folder.")],
) -> None:
    """Run token-level rollouts of task rows in sandboxes and write one record per rollout."""
    raise typer.Exit(2)
