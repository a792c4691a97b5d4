"""What every sandbox backend provides: a persistent shell, files in and out, a lifetime.

A backend is one folder under sandbox/ whose class subclasses `Sandbox` and is registered by one
line in sandbox/__init__.py. It writes five members: `start`, `close`, `alive`, `run` (the
persistent shell) and `exec` (a program run directly); everything else has a default. Files go
through `exec` by default (execfiles.py: correct for any size, but a process per operation): a
backend with a faster way overrides them, as Docker's and bwrap's do through the in-sandbox server
(serverfiles.py). What a backend cannot do it declares in its `Capabilities`: a sandbox whose spec
asks for more is refused in one line when it is made, and the optional operations (recycling,
snapshots) refuse in one line by default. tests/sandbox/conformance/ is the suite every backend
passes; docs/backends/writing-a-backend.md walks through writing one.

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

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Optional

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
    allow_hosts: tuple[str, ...] = ()  # network "registries": these hosts are let through too (HTTP and HTTPS)
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


# the SandboxLimits a backend may declare it holds (the disk: disk_limit), and their options
LIMITS = {"memory": "--memory", "cpus": "--cpus", "pids": "--pids-limit"}


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond the protocol's core. The rest of insandbox asks here (never by
    trying, never by looking for a method) and refuses in one line what a backend cannot do."""

    recycle: bool = False  # recycle(): one sandbox serves many samples, put back in between (pool.py)
    snapshot: bool = False  # snapshot(): copies of a live sandbox (fork)
    disk_limit: bool = False  # SandboxLimits.disk is enforced
    network_modes: tuple[str, ...] = ("none",)  # the SandboxLimits.network values it knows by name
    named_networks: bool = False  # any other value names a network of the backend's own
    limits: tuple[str, ...] = ()  # which of LIMITS it holds (a sandbox asking for another one is refused)
    runtimes: bool = False  # SandboxLimits.runtime names one of its engine's OCI runtimes
    build_images: bool = False  # build_image()/image_config(): images from a user's Dockerfile (Harbor tasks)


def _listed(names: tuple[str, ...]) -> str:
    return " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"


class Sandbox(ABC):
    """One sandbox. Subclasses write the five abstract members; the rest are defaults they may
    override. Class methods concern all of a backend's sandboxes (checking a spec, removing
    leftovers, a last-resort kill at a forced exit)."""

    backend: ClassVar[str]  # the name it registers under
    capabilities: ClassVar[Capabilities] = Capabilities()
    spec: SandboxSpec
    uses: int  # samples this sandbox has served (recycling gives it more than one)

    def __init__(self, spec: SandboxSpec):
        """A sandbox of `spec`, not started yet; SetupError in one line when the backend cannot be
        what the spec asks for (see `refusal`)."""
        why = type(self).refusal(spec)
        if why:
            raise SetupError(why)
        self.spec = spec
        self.uses = 0

    # ------------------------------------------------------------------ what a backend must write
    @abstractmethod
    async def start(self) -> None:
        """Make the sandbox and wait until it answers; `uses` becomes 1. On failure nothing is left behind."""

    @abstractmethod
    async def close(self) -> None:
        """Remove the sandbox. Safe to call twice, before start and after failures."""

    @property
    @abstractmethod
    def alive(self) -> bool:
        """Started, not closed, and still answering."""

    @abstractmethod
    async def run(self, command: str, timeout: float = defaults.COMMAND_TIMEOUT_S) -> CommandResult:
        """Run `command` in the persistent shell: the working folder, exported variables and functions
        carry over, background jobs keep running, stdin is empty, stdout and stderr come together (cut in
        the middle past spec.output_limit_chars). Past `timeout` the command is killed with every process
        it started (timed_out) and the shell goes on. A sandbox that stopped answering raises SandboxError
        (SandboxBrokenByItself when its own processes ended it)."""

    @abstractmethod
    async def exec(self, argv: list[str], timeout: float = 60.0, stdin: str = "") -> ExecResult:
        """Run a program directly, outside the model's shell (its state untouched), as the sandbox's root
        user in the sandbox's own view of its files."""

    # ------------------------------------------------------------------ the backend (class methods)
    @classmethod
    def refusal(cls, spec: SandboxSpec) -> str:
        """Why this backend cannot make a sandbox of `spec` ("" when it can), from its Capabilities alone:
        a network mode it does not know, an OCI runtime, a limit it does not hold."""
        caps, lim, name = cls.capabilities, spec.limits, cls.backend
        if lim.network not in caps.network_modes and not caps.named_networks:
            return f"the {name} backend cannot --network {lim.network}: it knows {_listed(caps.network_modes)}"
        if lim.runtime and not caps.runtimes:
            return f"the {name} backend has no OCI runtimes (--runtime {lim.runtime})"
        for limit, flag in LIMITS.items():
            if getattr(lim, limit) is not None and limit not in caps.limits:
                return (f"the {name} backend cannot hold a {limit} limit ({flag} {getattr(lim, limit)}); "
                        f"it holds {_listed(caps.limits) if caps.limits else 'none'}")
        if lim.disk is not None and not caps.disk_limit:
            return f"the {name} backend cannot hold a disk limit (--disk {lim.disk})"
        return ""

    @classmethod
    async def prepare(cls, spec: SandboxSpec, on_status: Progress = lambda text: None,
                      on_progress: Progress = lambda text: None) -> None:
        """Check the spec can work (image present or built, network known) before any run folder
        exists; raises SetupError for a bad setting and SandboxError when the backend is down.
        By default: what `refusal` says."""
        why = cls.refusal(spec)
        if why:
            raise SetupError(why)

    @classmethod
    def clean(cls, everything: bool = False, dry_run: bool = False) -> list[Leftover]:
        """Remove sandboxes left behind by processes that are gone (all of this backend's with everything).
        By default there are none: a backend whose sandboxes can outlive their process overrides it."""
        return []

    @classmethod
    async def reachable(cls, timeout: float = 10.0) -> bool:
        """Whether the backend (the engine) answers now. By default it always does (no engine)."""
        return True

    @classmethod
    async def remove_unremoved(cls) -> list[str]:
        """Remove this process's sandboxes whose removal failed while the backend was away (call it once
        the backend answers again); returns their names. Those still failing are kept for a later call."""
        return []

    @classmethod
    async def image_config(cls, image: str) -> Optional[dict]:
        """An image of the backend's, as {"workdir": its working folder, "python3": whether insandbox's
        server can run on it}; None when the backend does not have it. By default: refused."""
        raise SetupError(f"the {cls.backend} backend does not work with a task's own image")

    @classmethod
    async def build_image(cls, folder: Path, tag: str, timeout_s: float) -> None:
        """Build the Dockerfile in `folder` as `tag` (SandboxError with the build's last lines when it
        fails or runs past `timeout_s`). By default: refused."""
        raise SetupError(f"the {cls.backend} backend does not build images from a Dockerfile")

    @classmethod
    def kill_all_now(cls) -> None:
        """Last resort at a forced exit: remove this process's sandboxes at once, blocking. By default
        nothing: a backend whose sandboxes would outlive this process overrides it."""
        return None

    # ------------------------------------------------------------------ one sandbox: defaults
    def info(self) -> dict:
        """What to record about this sandbox: backend, image, ids, limits, start-up timings."""
        return {"backend": self.backend, "image": self.spec.image, "limits": vars(self.spec.limits).copy()}

    async def stat(self, path: str) -> Optional[FileStat]:
        """The path itself, not following a final symlink; None when it does not exist."""
        from . import execfiles

        return await execfiles.stat(self, path)

    async def resolve(self, path: str) -> tuple[str, Optional[FileStat]]:
        """Follow symlinks inside the sandbox: the real path and its stat (None when missing)."""
        from . import execfiles

        return await execfiles.resolve(self, path)

    async def read_file(self, path: str, max_bytes: Optional[int] = None) -> bytes:
        """A regular file's bytes (symlinks followed inside the sandbox); anything else is a SandboxFileError."""
        from . import execfiles

        return await execfiles.read_file(self, path, max_bytes)

    async def write_file(self, path: str, data: bytes, mode: Optional[int] = None) -> None:
        """Write a regular file (where a symlink points, inside the sandbox), its folders made."""
        from . import execfiles

        await execfiles.write_file(self, path, data, 0o644 if mode is None else mode)

    async def remove_file(self, path: str) -> None:
        res = await self.exec(["rm", "-f", "--", path])
        if res.exit_code != 0:
            raise SandboxFileError(f"cannot remove {path}: {res.stderr.strip()}")

    async def copy_in(self, host_path: Path, container_dir: str) -> None:
        """Copy a host file or the contents of a host directory into container_dir."""
        from . import execfiles

        await execfiles.copy_in(self, Path(host_path), container_dir)

    async def copy_in_files(self, files: dict[str, bytes], container_dir: str) -> None:
        """Place in-memory files {relative path: bytes} under container_dir."""
        await self._mkdir(container_dir)
        for name, data in files.items():
            await self.write_file(f"{container_dir.rstrip('/')}/{name.lstrip('/')}", data)

    async def copy_out(self, container_dir: str, host_dir: Path, limits: Optional[CopyLimits] = None) -> CopyResult:
        """Copy the regular files under container_dir into host_dir, file by file within the limits;
        links, FIFOs, devices and whatever exceeds a limit are skipped and listed with the reason (the
        first few one by one, the rest counted by reason: see copyback.py)."""
        from . import execfiles

        return await execfiles.copy_out(self, container_dir, Path(host_dir), limits)

    async def _mkdir(self, container_dir: str) -> None:
        res = await self.exec(["mkdir", "-p", "--", container_dir])
        if res.exit_code != 0:
            raise SandboxError(f"cannot create {container_dir} in the sandbox: {res.stderr.strip()}")

    # ------------------------------------------------------------------ optional (see Capabilities)
    @property
    def recyclable(self) -> bool:
        """This sandbox can be recycled now (capabilities.recycle, and what its reset needs is there)."""
        return False

    async def recycle(self) -> dict:
        """As good as new for another sample; returns what the reset did. SandboxError when it cannot:
        the caller then closes it, never reuses it."""
        raise SandboxError(f"the {self.backend} backend cannot recycle a sandbox")

    async def snapshot(self) -> Any:
        """An object whose start_copies(n) starts n independent copies of this sandbox (fork)."""
        raise SetupError(f"the {self.backend} backend cannot snapshot a sandbox")


def require(cls: type, capability: str, what: str) -> None:
    """SetupError in one line unless the backend class has the capability."""
    if not getattr(cls.capabilities, capability):
        raise SetupError(f"the {cls.backend} backend cannot {what}")
