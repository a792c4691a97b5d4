"""`insandbox rl ...`: build context tasks, run token-level rollouts, train, export. Each command's module
imports what it needs when it runs, so `insandbox --help` stays fast."""
from __future__ import annotations

import typer

from ..rl.trainers.verl_data import verl_data
from .command import Command
from .rl_data import build_data
from .rl_rollout import rollout
from .rl_train import export, train

app = typer.Typer(no_args_is_help=True, help="LLM-in-Sandbox-RL: build context tasks, run token-level rollouts in "
                                             "sandboxes, train with GRPO.")
app.command("build-data", cls=Command)(build_data)
app.command("rollout", cls=Command)(rollout)
app.command("train", cls=Command)(train)
app.command("export", cls=Command)(export)
app.command("verl-data", cls=Command)(verl_data)
