"""`insandbox rl ...`: each command lives with its area (data/, rollout/, trainers/) and is
registered here; modules are imported when the command runs, so `insandbox --help` stays fast."""
from __future__ import annotations

import importlib
from typing import Any

import typer

app = typer.Typer(no_args_is_help=True, help="LLM-in-Sandbox-RL: build context tasks, run token-level rollouts in "
                                             "sandboxes, train with GRPO.")

COMMANDS = {
    "build-data": "insandbox.rl.data.command:build_data",
    "rollout": "insandbox.rl.rollout.command:rollout",
    "train": "insandbox.rl.trainers.command:train",
    "export": "insandbox.rl.trainers.command:export",
    "verl-data": "insandbox.rl.trainers.verl_data:verl_data",
}


def _load(path: str) -> Any:
    module, attr = path.split(":")
    return getattr(importlib.import_module(module), attr)


for _name, _path in COMMANDS.items():
    app.command(_name)(_load(_path))
