"""What every sandbox backend provides: a persistent shell, files in and out, a lifetime.

A backend is one file in this folder implementing `Sandbox`. Everything above this
layer (tools, environment, agent) only talks to this protocol.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Protocol, runtime_checkable


class SandboxError(RuntimeError):
    """The sandbox itself failed (engine unreachable, container died, channel broke):
    an infrastructure error, never the model's fault."""


class ServerError(SandboxError):
    """The in-container server answered a request with an error (e.g. a file it could not read);
    the sandbox itself is fine. `message` is the server's own words."""

    def __init__(self, sandbox: str, message: str):
        super().__init__(f"sandbox {sandbox}: server error: {message}")
        self.message = message


class SandboxFileError(SandboxError):
    """A file operation failed for a reason the model can act on (missing path, ...)."""


@dataclass
class CommandResult:
    """One command run in the persistent shell."""

    output: str  # the head of the output (all of it when nothing was cut)
    exit_code: Optional[int]  # None when the command was killed and bash never returned
    output_tail: str = ""  # the end of the output when the middle was cut
    cut_chars: int = 0  # characters missing between `output` and `output_tail`
    total_chars: int = 0
    total_bytes: int = 0
    timed_out: bool = False
    shell_restarted: bool = False  # the shell died or had to be killed; state was restored
    shell_exited: bool = False  # the command itself ended the shell (`exit`, `exec`)
    duration_s: float = 0.0
    cwd: str = ""


@dataclass
class ExecResult:
    """A program run directly, outside the model's shell (for the host's own helpers)."""

    exit_code: Optional[int]
    stdout: str
    stderr: str
    timed_out: bool = False


@dataclass
class FileStat:
    name: str
    size: int
    mode: int  # permission bits
    is_dir: bool
    link_target: str = ""


@dataclass
class SandboxLimits:
    """Per-sandbox resource limits (None: no limit)."""

    memory: Optional[str] = "4g"  # docker syntax: 512m, 4g
    cpus: Optional[float] = 2.0
    pids: Optional[int] = 1024
    network: str = "bridge"  # "none" cuts the sandbox off; "host" shares the host's


@dataclass
class SandboxSpec:
    """Everything needed to start one sandbox."""

    image: str = "insandbox:latest"
    workdir: str = "/testbed"
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    env: dict = field(default_factory=dict)
    run_id: str = ""
    output_limit_chars: int = 16000  # per command, head + tail
    # Single files up to this size are read and written through the sandbox's own server
    # (byte-exact, ~2 ms); larger ones, and whole folders, through the engine's archive
    # API (~60 ms and engine CPU per call). 0: always the archive API.
    fast_file_max_bytes: int = 1 << 20


@runtime_checkable
class Sandbox(Protocol):
    spec: SandboxSpec

    async def start(self) -> None: ...

    async def run(self, command: str, timeout: float = 120.0) -> CommandResult:
        """Run `command` in the persistent shell (cwd, env and functions persist)."""

    async def exec(self, argv: list[str], timeout: float = 60.0, stdin: str = "") -> ExecResult:
        """Run a program directly, outside the model's shell."""

    async def read_file(self, path: str, max_bytes: Optional[int] = None) -> bytes: ...

    async def write_file(self, path: str, data: bytes, mode: Optional[int] = None) -> None: ...

    async def stat(self, path: str) -> Optional[FileStat]:
        """None when the path does not exist."""

    async def remove_file(self, path: str) -> None: ...

    async def copy_in(self, host_path: Path, container_dir: str) -> None:
        """Copy a host file or the contents of a host directory into container_dir."""

    async def copy_in_files(self, files: dict[str, bytes], container_dir: str) -> None:
        """Place in-memory files {relative path: bytes} under container_dir."""

    async def copy_out(self, container_dir: str, host_dir: Path, max_bytes: Optional[int] = None) -> list[str]:
        """Copy the contents of container_dir into host_dir; returns the files written."""

    async def close(self) -> None:
        """Remove the sandbox. Safe to call twice and after failures."""
