"""The kinds of failure that end a run, one place for all layers: Episode.end_on_error maps each to
its exit reason, and the command line to its exit status (2 for a bad setting, 1 for a failure)."""
from __future__ import annotations


class ConfigError(ValueError):
    """A setting is missing or wrong; the message says how to fix it."""


class ModelError(RuntimeError):
    """The model server could not give an answer (after retries): ends the run.
    `latency_s` is how long the request was tried, so the time is never lost."""

    latency_s: float = 0.0


class ContextLengthError(ModelError):
    """The conversation no longer fits the model's context, even with a smaller max_tokens."""


class SandboxError(RuntimeError):
    """The sandbox itself failed (engine unreachable, container died, channel broke):
    an infrastructure error, never the model's fault."""


class SandboxBrokenByItself(SandboxError):
    """The sandbox died of what its own processes did (its memory limit killed the container,
    its server with it): still `sandbox_error`, but the model's doing (Episode.exit_cause "sandbox")."""


class SetupError(ValueError):
    """A setting cannot work with this backend (no such network, image missing and not buildable);
    found before anything is started, so the caller can report a bad argument."""
