"""`insandbox rl train` (filled in by the TRL trainer)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def train(
    config: Annotated[Optional[Path], typer.Argument(help="Training config YAML.")] = None,
    preset: Annotated[Optional[str], typer.Option(help="A built-in preset (smoke, paper).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Output folder.")] = None,
) -> None:
    """Train a policy with GRPO on context tasks, with rollouts in real sandboxes."""
    raise typer.Exit(2)
