"""Every error insandbox raises on purpose, under one root: `InsandboxError`.

    InsandboxError                  exit 1: insandbox, the sandbox or the model server failed
    ├── ConfigError                 exit 2: a setting, argument, option or config file is wrong or missing
    │   └── SetupError              ... found by the sandbox backend before anything starts
    ├── DataError                   exit 2: data or a folder insandbox reads is unusable (rows, a run folder)
    ├── SandboxError                exit 1: the sandbox itself failed (the infrastructure's fault)
    │   └── SandboxBrokenByItself   ... of what its own processes did (the model's doing)
    ├── ModelError                  exit 1: the model server gave no answer, after retries
    │   └── ContextLengthError      ... the conversation no longer fits the model's context
    ├── ToolError                   no exit: told to the model as its tool call's result; the episode goes on
    └── InternalSignal              no exit: caught by the module that raises it; anywhere else it is a bug

Leaves live beside the code that raises them (`ServerSilent` in sandbox/channel.py, `ReplayError` in
replay/); each keeps the builtin base its callers catch it by (`ValueError` for ConfigError and
DataError: pydantic validators and `except ValueError` callers; `RuntimeError` for SandboxError and
ModelError; `OSError`, `ModuleNotFoundError` for a few leaves). `exit_code` is the command line's
exit status for an error that ends a command (cli/common.py); Episode.end_on_error maps the ones that
end an episode to its exit reason. docs/reference/errors.md lists every class.
"""
from __future__ import annotations

from typing import ClassVar, Optional


class InsandboxError(Exception):
    """The root of every error insandbox raises on purpose; its message is one line, written for a person."""

    # the exit status of a command this error ends; None: it never reaches the command line (a bug if it does)
    exit_code: ClassVar[Optional[int]] = 1


class ConfigError(InsandboxError, ValueError):
    """A setting is missing or wrong; the message says how to fix it."""

    exit_code: ClassVar[Optional[int]] = 2


class SetupError(ConfigError):
    """A setting cannot work with this backend (no such network, image missing and not buildable);
    found before anything is started, so the caller can report a bad argument. An episode it ends
    ends as `sandbox_error`."""


class DataError(InsandboxError, ValueError):
    """Data or a folder insandbox reads cannot be used (task rows, a data set, a run folder, a recorded
    trajectory); the message (one line) says which and why."""

    exit_code: ClassVar[Optional[int]] = 2


class ModelError(InsandboxError, RuntimeError):
    """The model server could not give an answer (after retries): ends the run.
    `latency_s` is how long the request was tried, so the time is never lost."""

    latency_s: float = 0.0


class ContextLengthError(ModelError):
    """The conversation no longer fits the model's context, even with a smaller max_tokens."""


class SandboxError(InsandboxError, RuntimeError):
    """The sandbox itself failed (engine unreachable, container died, channel broke):
    an infrastructure error, never the model's fault."""


class SandboxBrokenByItself(SandboxError):
    """The sandbox died of what its own processes did (its memory limit killed the container,
    its server with it): still `sandbox_error`, but the model's doing (Episode.exit_cause "sandbox")."""


class ToolError(InsandboxError):
    """What the model asked for could not be done (a missing file, arguments that do not fit the tool);
    the message is written for the model, which reads it as the call's result."""

    exit_code: ClassVar[Optional[int]] = None


class InternalSignal(InsandboxError):
    """Control flow inside one module (a try to retry, a path to answer 404, a sandbox not to reuse):
    caught by the code that raises it and turned into something else."""

    exit_code: ClassVar[Optional[int]] = None
