"""Where commands run. `Sandbox` is the base class of every backend (base.py); each backend is one
folder under sandbox/ with a Sandbox subclass, registered here by one line and imported only when
used. tests/sandbox/conformance/ is the suite each one passes (docs/backends/writing-a-backend.md)."""
from __future__ import annotations

import importlib
import sys

from ..core import defaults
from .base import (
    Capabilities,
    CommandResult,
    CopyLimits,
    CopyResult,
    ExecResult,
    FileStat,
    OperationError,
    Sandbox,
    SandboxBrokenByItself,
    SandboxError,
    SandboxFileError,
    SandboxLimits,
    SandboxSpec,
    ServerError,
    SetupError,
    Skipped,
)

# name -> "module:class". A new backend is a folder under sandbox/ and one line here.
BACKENDS = {
    "docker": "insandbox.sandbox.docker:DockerSandbox",
    "bwrap": "insandbox.sandbox.bwrap:BwrapSandbox",
}


def register_backend(name: str, target: str) -> None:
    """Register a backend from outside the package ("module:class"), e.g. a plugin's or a test's."""
    BACKENDS[name] = target


def backend_class(name: str = defaults.BACKEND) -> type[Sandbox]:
    """The backend class registered under `name` (its module is imported on first use)."""
    try:
        module, cls = BACKENDS[name].split(":")
    except KeyError:
        raise SetupError(f"unknown sandbox backend {name!r}; known: {', '.join(BACKENDS)}") from None
    found = getattr(importlib.import_module(module), cls)
    if not (isinstance(found, type) and issubclass(found, Sandbox)):
        raise SetupError(f"sandbox backend {name!r} ({BACKENDS[name]}) is not a subclass of insandbox.sandbox.Sandbox")
    return found


def create_sandbox(spec: SandboxSpec, backend: str = defaults.BACKEND) -> Sandbox:
    return backend_class(backend)(spec)


def kill_all_now() -> None:
    """At a forced exit: every loaded backend removes this process's sandboxes at once."""
    for path in BACKENDS.values():
        module, cls = path.split(":")
        if module in sys.modules:
            getattr(sys.modules[module], cls).kill_all_now()


__all__ = ["BACKENDS", "Capabilities", "CommandResult", "CopyLimits", "CopyResult", "ExecResult", "FileStat",
           "OperationError", "Sandbox", "SandboxBrokenByItself", "SandboxError", "SandboxFileError", "SandboxLimits",
           "SandboxSpec", "ServerError", "SetupError", "Skipped", "backend_class", "create_sandbox", "kill_all_now",
           "register_backend"]
