"""Where commands run. `Sandbox` is the protocol; `DockerSandbox` the backend."""
from .base import (
    CommandResult,
    ExecResult,
    FileStat,
    Sandbox,
    SandboxError,
    SandboxFileError,
    SandboxLimits,
    SandboxSpec,
)

BACKENDS = {"docker": "insandbox.sandbox.docker:DockerSandbox"}


def create_sandbox(spec: SandboxSpec, backend: str = "docker") -> Sandbox:
    """Instantiate a backend by name (imported lazily: the Docker SDK is only loaded when used)."""
    import importlib

    try:
        module, cls = BACKENDS[backend].split(":")
    except KeyError:
        raise ValueError(f"unknown sandbox backend {backend!r}; known: {', '.join(BACKENDS)}") from None
    return getattr(importlib.import_module(module), cls)(spec)


__all__ = ["CommandResult", "ExecResult", "FileStat", "Sandbox", "SandboxError", "SandboxFileError",
           "SandboxLimits", "SandboxSpec", "create_sandbox", "BACKENDS"]
