"""What every sandbox backend provides: a persistent shell, files in and out, a lifetime.

A backend is one file in this folder implementing `Sandbox` (instance methods for one
sandbox, class methods for what concerns all of a backend's sandboxes: preparing the
image, removing leftovers, a last-resort kill at a forced exit). Everything above this
layer (tools, environment, agent, runner, CLI) only talks to this protocol.

Two kinds of failure, never mixed:
- `SandboxError`: the sandbox itself is broken (engine gone, container dead, channel
  broken); it ends the episode as `sandbox_error`. The infrastructure's fault, except
  `SandboxBrokenByItself`: what the sandbox's own processes did killed it (the kernel killed
  the container for its memory limit), which is the model's doing.
- `OperationError`: one operation failed and the sandbox is fine (a missing file, a FIFO
  where a file was expected, a path the server cannot open). Usually the model's doing;
  the tools turn it into an error message the model reads, and the episode goes on.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Protocol, runtime_checkable

from ..core import defaults
from ..core.errors import SandboxBrokenByItself, SandboxError, SetupError, ToolError  # noqa: F401 (the sandbox's failures)
from ..core.units import parse_size

if TYPE_CHECKING:
    from .admission import Admission


class OperationError(ToolError):
    """One operation failed; the sandbox is fine. The message is written for the model."""


class SandboxFileError(OperationError):
    """A file operation failed for a reason the model can act on (missing path, not a regular file, ...)."""


class ServerError(OperationError):
    """The in-container server answered a request with an error (e.g. a file it could not open);
    the sandbox itself is fine. `message` is the server's own words."""

    def __init__(self, sandbox: str, message: str):
        super().__init__(message)
        self.sandbox = sandbox
        self.message = message




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
    oom_kills: int = 0  # processes the kernel killed during the command for the memory limit
    streams_restored: bool = False  # the command closed or redirected the shell's stdout/stderr; undone
    duration_s: float = 0.0
    cwd: str = ""
    # after a timeout: whether this machine saw, from outside the sandbox, every process of the command
    # gone (False: the backend cannot see them), and how many still ran after it killed them itself
    kill_checked: bool = False
    survivors: int = 0


@dataclass
class ExecResult:
    """A program run directly, outside the model's shell (for the host's own helpers)."""

    exit_code: Optional[int]
    stdout: str
    stderr: str
    timed_out: bool = False


# What a path is. Only regular files are ever read or written: reading a FIFO or a device
# would block or never end.
FILE, DIRECTORY, SYMLINK, FIFO, SOCKET, CHAR_DEVICE, BLOCK_DEVICE = (
    "file", "directory", "symlink", "FIFO", "socket", "character device", "block device")


@dataclass
class FileStat:
    name: str
    size: int
    mode: int  # permission bits
    kind: str = FILE  # one of the kinds above
    link_target: str = ""

    @property
    def is_dir(self) -> bool:
        return self.kind == DIRECTORY

    @property
    def is_file(self) -> bool:
        return self.kind == FILE


@dataclass
class SandboxLimits:
    """Per-sandbox resource limits (None: no limit)."""

    memory: Optional[str] = defaults.MEMORY  # docker syntax: 512m, 4g
    cpus: Optional[float] = defaults.CPUS
    pids: Optional[int] = defaults.PIDS
    network: str = defaults.NETWORK  # none: cut off; registries: PyPI and Debian only; host: the host's
    disk: Optional[str] = defaults.DISK  # what the sandbox may write (enforced where the engine's storage can)
    runtime: Optional[str] = None  # the engine's OCI runtime, e.g. runsc (gVisor); None: the engine's default
    cap_add: tuple[str, ...] = ()  # capabilities on top of the few kept (see sandbox/limits.py)
    # memory and disk in bytes, read once here: backends take these, never the text (kept for messages)
    memory_bytes: Optional[int] = field(init=False, repr=False, compare=False)
    disk_bytes: Optional[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.memory_bytes = None if self.memory is None else parse_size(self.memory)
        self.disk_bytes = None if self.disk is None else parse_size(self.disk)


@dataclass
class SandboxSpec:
    """Everything needed to start one sandbox."""

    image: str = defaults.IMAGE
    workdir: str = defaults.WORKDIR
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    env: dict = field(default_factory=dict)
    run_id: str = ""
    output_limit_chars: int = defaults.OUTPUT_LIMIT  # per command, head + tail
    # Single files up to this size are read and written through the sandbox's own server
    # (byte-exact, ~2 ms); larger ones, and whole folders, through the engine's archive
    # API (~60 ms and engine CPU per call). 0: always the archive API.
    fast_file_max_bytes: int = 1 << 20
    build_image: bool = True  # prepare(): build a missing image when the backend knows how
    recyclable: bool = False  # keep what recycle() needs, so one container can serve many samples (pool.py)
    # the session's way through the host's admission gate (its cap, its status line); None: the process's gate
    admission: Optional[Admission] = field(default=None, compare=False, repr=False)


@dataclass
class CopyLimits:
    """What copy_out brings back at most (None: no limit); anything past a limit is skipped and recorded.
    `max_entries` counts every entry of the folder (files, folders, symbolic links, FIFOs, sockets,
    devices): past it the rest is not looked at. `max_listing_bytes` bounds the listing itself (its
    entries as JSON, long paths and link targets included) and always applies."""

    max_file_bytes: Optional[int] = defaults.COPY_MAX_FILE_BYTES
    max_total_bytes: Optional[int] = defaults.COPY_MAX_TOTAL_BYTES
    max_entries: Optional[int] = defaults.COPY_MAX_ENTRIES
    max_listing_bytes: int = defaults.COPY_MAX_LISTING_BYTES


@dataclass
class Skipped:
    """An entry of the output folder that was not copied back, and why."""

    path: str  # relative to the folder copied
    reason: str
    size: Optional[int] = None


@dataclass
class CopyResult:
    files: list[str] = field(default_factory=list)  # written, relative paths
    skipped: list[Skipped] = field(default_factory=list)


@dataclass
class Leftover:
    """A sandbox that `clean` may remove."""

    id: str
    name: str
    run_id: str
    status: str
    reason: str


Progress = Callable[[str], None]


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond the protocol's core. The rest of insandbox asks here (never by
    trying, never by looking for a method) and refuses in one line what a backend cannot do."""

    recycle: bool = False  # recycle(): one sandbox serves many samples, put back in between (pool.py)
    snapshot: bool = False  # snapshot(): copies of a live sandbox (fork)
    disk_limit: bool = False  # SandboxLimits.disk is enforced
    network_modes: tuple[str, ...] = ("none",)  # the SandboxLimits.network values it knows by name
    named_networks: bool = False  # any other value names a network of the backend's own


@runtime_checkable
class Sandbox(Protocol):
    backend: ClassVar[str]  # the name it registers under
    capabilities: ClassVar[Capabilities]
    spec: SandboxSpec
    uses: int  # samples this sandbox has served (recycling gives it more than one)

    # ------------------------------------------------------------------ the backend
    @classmethod
    async def prepare(cls, spec: SandboxSpec, on_status: Progress, on_progress: Progress) -> None:
        """Check the spec can work (image present or built, network known) before any run folder
        exists; raises SetupError for a bad setting and SandboxError when the backend is down."""

    @classmethod
    def clean(cls, everything: bool = False, dry_run: bool = False) -> list[Leftover]:
        """Remove sandboxes left behind by processes that are gone (all of this backend's with everything)."""

    @classmethod
    async def reachable(cls, timeout: float = 10.0) -> bool:
        """Whether the backend (the engine) answers now."""

    @classmethod
    async def remove_unremoved(cls) -> list[str]:
        """Remove this process's sandboxes whose removal failed while the backend was away (call it once
        the backend answers again); returns their names. Those still failing are kept for a later call."""

    @classmethod
    def kill_all_now(cls) -> None:
        """Last resort at a forced exit: remove this process's sandboxes at once, blocking."""

    # ------------------------------------------------------------------ one sandbox
    async def start(self) -> None: ...

    def info(self) -> dict:
        """What to record about this sandbox: backend, image, ids, limits, start-up timings."""

    async def run(self, command: str, timeout: float = defaults.COMMAND_TIMEOUT_S) -> CommandResult:
        """Run `command` in the persistent shell (cwd, env and functions persist)."""

    async def exec(self, argv: list[str], timeout: float = 60.0, stdin: str = "") -> ExecResult:
        """Run a program directly, outside the model's shell."""

    async def read_file(self, path: str, max_bytes: Optional[int] = None) -> bytes:
        """A regular file's bytes (symlinks followed inside the sandbox); anything else is a SandboxFileError."""

    async def write_file(self, path: str, data: bytes, mode: Optional[int] = None) -> None: ...

    async def stat(self, path: str) -> Optional[FileStat]:
        """The path itself, not following a final symlink; None when it does not exist."""

    async def resolve(self, path: str) -> tuple[str, Optional[FileStat]]:
        """Follow symlinks inside the sandbox: the real path and its stat (None when missing)."""

    async def remove_file(self, path: str) -> None: ...

    async def copy_in(self, host_path: Path, container_dir: str) -> None:
        """Copy a host file or the contents of a host directory into container_dir."""

    async def copy_in_files(self, files: dict[str, bytes], container_dir: str) -> None:
        """Place in-memory files {relative path: bytes} under container_dir."""

    async def copy_out(self, container_dir: str, host_dir: Path, limits: Optional[CopyLimits] = None) -> CopyResult:
        """Copy the regular files under container_dir into host_dir, file by file within the limits;
        links, FIFOs, devices and whatever exceeds a limit are skipped and listed with the reason (the
        first few one by one, the rest counted by reason: see copyback.py)."""

    async def close(self) -> None:
        """Remove the sandbox. Safe to call twice and after failures."""

    @property
    def alive(self) -> bool:
        """Started, not closed, and still answering."""

    # ------------------------------------------------------------------ optional (see Capabilities)
    @property
    def recyclable(self) -> bool:
        """This sandbox can be recycled now (capabilities.recycle, and what its reset needs is there)."""

    async def recycle(self) -> dict:
        """As good as new for another sample; returns what the reset did. SandboxError when it cannot:
        the caller then closes it, never reuses it."""

    async def snapshot(self) -> Any:
        """An object whose start_copies(n) starts n independent copies of this sandbox (fork)."""


def require(cls: type, capability: str, what: str) -> None:
    """SetupError in one line unless the backend class has the capability."""
    if not getattr(cls.capabilities, capability):
        raise SetupError(f"the {cls.backend} backend cannot {what}")
