"""Snapshots of a live Docker sandbox, and independent copies started from one (fork).

A snapshot holds the two halves of a sandbox's state:
- its files: the container is committed (paused meanwhile) to a temporary image, labelled
  `insandbox.snapshot=1` and with the owner process. Copies are ordinary sandboxes of that image:
  the engine shares the snapshot's layer between them, so each copy starts as fast as any
  sandbox, whatever the snapshot holds, and has a disk limit of its own as usual. The other way
  measured (copying the container's overlay upper folder on the host into each copy) pays the
  copy once per copy instead of once per snapshot; see benchmarks/bench_fork.py.
- its shell: the persistent bash's variables (exported or not, with their attributes), functions,
  aliases, shell options, umask and working directory, written as a script by the shell itself and
  kept on the host; each copy sources it once started. Processes (background jobs, servers the
  model started) are not carried: a copy starts with no process of the model's running.

The image goes when the last copy that uses it is released (`release()`), or at `remove()`;
`insandbox clean` removes those of processes that are gone (`--all`: every one no sandbox uses).
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from typing import TYPE_CHECKING

from ..base import Leftover, SandboxError
from ..guest.protocol import STATE_DIR
from . import engine
from .labels import LABEL_OWNER, owner_gone, owner_label

if TYPE_CHECKING:
    from .backend import DockerSandbox

REPOSITORY = "insandbox-snapshot"
LABEL_SNAPSHOT = "insandbox.snapshot"
STATE_FILE = f"{STATE_DIR}/fork-state.sh"  # in the sandbox's in-memory folder: never committed

# bash's own variables (read-only, or meaningless in another shell) and ours are not carried
_NOT_CARRIED = ("__isb_*|BASH|BASH_*|BASHOPTS|BASHPID|COLUMNS|COMP_*|DIRSTACK|EPOCHREALTIME|EPOCHSECONDS|EUID|"
                "FUNCNAME|GROUPS|HISTCMD|HOSTNAME|HOSTTYPE|LINENO|LINES|MACHTYPE|OPTERR|OPTIND|OSTYPE|PIPESTATUS|"
                "PPID|PWD|RANDOM|SECONDS|SHELLOPTS|SHLVL|SRANDOM|UID|_|INSANDBOX_CMD_ID")
CAPTURE = (
    "__isb_keep=(); mapfile -t __isb_names < <(compgen -v); for __isb_v in \"${__isb_names[@]}\"; do "
    "case $__isb_v in @SKIP@) ;; *) __isb_keep+=(\"$__isb_v\");; "
    "esac; done; { declare -p \"${__isb_keep[@]}\"; declare -f; alias -p; shopt -p | grep -v extdebug; "
    "set +o | grep -v -e errexit -e history -e monitor; printf 'umask %s\\n' \"$(umask)\"; "
    "printf 'cd -- %q\\n' \"$PWD\"; } > @FILE@ 2>/dev/null; unset __isb_keep __isb_v __isb_names"
).replace("@SKIP@", _NOT_CARRIED).replace("@FILE@", STATE_FILE)
RESTORE = f"source {STATE_FILE} >/dev/null 2>&1; rm -f {STATE_FILE}"


@dataclasses.dataclass
class Snapshot:
    image: str  # the temporary image's id
    tag: str
    spec: object  # the SandboxSpec copies start with (the source's, with the snapshot's image)
    sandbox_class: type  # what copies are (the source's class)
    shell_state: bytes
    cwd: str
    timings: dict = dataclasses.field(default_factory=dict)
    users: int = 0  # copies holding it (acquire/release)
    removed: bool = False

    async def start_copy(self) -> DockerSandbox:
        """A new sandbox with the snapshot's files and shell state."""
        if self.removed:
            raise SandboxError(f"snapshot {self.tag} was removed")
        sandbox = self.sandbox_class(self.spec)
        await sandbox.start()
        try:
            await sandbox.write_file(STATE_FILE, self.shell_state, 0o600)
            await sandbox.run(RESTORE, timeout=60)
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    async def start_copies(self, n: int) -> list[DockerSandbox]:
        """n copies, started together; if one fails, the others are removed and the error raised."""
        results = await asyncio.gather(*(self.start_copy() for _ in range(n)), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            await asyncio.gather(*(r.close() for r in results if not isinstance(r, BaseException)),
                                 return_exceptions=True)
            raise failed[0]
        return list(results)

    def acquire(self) -> None:
        self.users += 1

    async def release(self) -> None:
        """One user is done with it (its sandbox removed); the last one removes the image."""
        self.users = max(self.users - 1, 0)
        if self.users == 0:
            await self.remove()

    async def remove(self) -> bool:
        """Remove the image; False when a sandbox still uses it (it is kept, for clean or a later call)."""
        if self.removed:
            return True
        try:
            await engine.call(engine.api().remove_image, self.image, noprune=False)
        except Exception as e:
            if not engine.is_not_found(e):
                return False
        self.removed = True
        return True


async def take(sandbox: DockerSandbox) -> Snapshot:
    """Snapshot a started sandbox (between commands: its shell must be idle)."""
    if sandbox.container_id is None or sandbox.channel is None:
        raise SandboxError("the sandbox is not started")
    t0 = time.perf_counter()
    res = await sandbox.run(CAPTURE, timeout=60)
    if res.exit_code is None:
        raise SandboxError(f"could not save the shell's state: {res.output[:200]}")
    state = await sandbox.read_file(STATE_FILE)
    await sandbox.exec(["rm", "-f", STATE_FILE])
    t1 = time.perf_counter()
    tag = uuid.uuid4().hex[:12]
    changes = [f"LABEL {LABEL_SNAPSHOT}=1", f'LABEL {LABEL_OWNER}="{owner_label()}"']
    try:
        made = await engine.call(engine.api().commit, sandbox.container_id, repository=REPOSITORY, tag=tag,
                                 changes=changes, pause=True)
    except Exception as e:
        raise SandboxError(f"could not snapshot sandbox {sandbox.name}: {e}") from e
    spec = dataclasses.replace(sandbox.spec, image=f"{REPOSITORY}:{tag}", build_image=False)
    return Snapshot(image=made["Id"], tag=f"{REPOSITORY}:{tag}", spec=spec, sandbox_class=type(sandbox),
                    shell_state=state, cwd=res.cwd,
                    timings={"shell_s": t1 - t0, "commit_s": time.perf_counter() - t1})


def clean_images(everything: bool = False, dry_run: bool = False) -> list[Leftover]:
    """Snapshot images of processes that are gone (every one with `everything`) that no container uses."""
    api = engine.api()
    used = {c.get("ImageID") for c in api.containers(all=True)}
    out = []
    for img in api.images(all=True, filters={"label": f"{LABEL_SNAPSHOT}=1"}):
        owner = (img.get("Labels") or {}).get(LABEL_OWNER, "")
        reason = owner_gone(owner) or ("--all" if everything else "")
        if not reason or img["Id"] in used:
            continue
        name = (img.get("RepoTags") or [img["Id"][:19]])[0]
        if not dry_run:
            try:
                api.remove_image(img["Id"])
            except Exception as e:
                if not engine.is_not_found(e):
                    continue  # taken into use meanwhile: a later clean gets it
        out.append(Leftover(id=img["Id"], name=name, run_id="", status="snapshot image", reason=reason))
    return out

