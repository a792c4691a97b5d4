"""The engine's container runtimes, and gVisor among them.

`--runtime NAME` names a runtime the engine has registered (`docker info`: Runtimes). `gvisor` (and
`runsc`) names gVisor whatever the engine calls it: the runtime registered as `gvisor`, else as
`runsc`, else any whose program is runsc. scripts/setup.sh registers it as `runsc` when asked
(INSANDBOX_GVISOR=1), with `--network=host`: gVisor's own network stack will not start in the root
network namespace of some VMs, and this flag hands it the container's namespace instead, so the
sandbox's packet filter (netfilter.py) still applies.

Under gVisor a sandbox preloads the image's statx shim (image/statx_compat.c: Debian's runsc
refuses a flag coreutils passes), and is never recycled: gVisor keeps its own view of the files it
serves, which a restore on the host would leave stale, so each sample gets a fresh sandbox.
"""
from __future__ import annotations

import os
import threading
from typing import Optional

from ..base import SetupError
from . import engine

GVISOR_NAMES = ("gvisor", "runsc")
STATX_SHIM = "/usr/local/lib/insandbox-statx-compat.so"
SHIM_LABEL = "insandbox.gvisor_ready"  # on images built with the shim and a /tmp that is not empty

# runsc sometimes fails to boot a sandbox on a loaded machine ("cannot create sandbox: cannot read client
# sync file"), and the engine's next start of that layer can trip over the half-made mount ("inconsistent
# paths"): a fresh container, up to this many tries in all
BOOT_TRIES = 3
_BOOT_FAILURES = ("cannot create sandbox", "client sync file", "inconsistent paths")

_lock = threading.Lock()
_known: dict[str, dict] = {}  # docker host -> the engine's runtimes


def registered(api) -> dict:
    host = engine.docker_host()
    with _lock:
        if host not in _known:
            _known[host] = api.info().get("Runtimes") or {}
        return _known[host]


def is_gvisor_program(entry: dict) -> bool:
    return os.path.basename(str((entry or {}).get("path", ""))) == "runsc"


def resolve(api, name: Optional[str]) -> tuple[Optional[str], bool]:
    """(the engine's name for it, whether it is gVisor); SetupError when the engine has no such runtime."""
    if not name:
        return None, False
    known = registered(api)
    if name in GVISOR_NAMES:
        for candidate in GVISOR_NAMES:
            if candidate in known and is_gvisor_program(known[candidate]):
                return candidate, True
        for other, entry in sorted(known.items()):
            if is_gvisor_program(entry):
                return other, True
        raise SetupError(f"--runtime {name}: the Docker engine has no gVisor runtime (it has: "
                         f"{', '.join(sorted(known))}); `INSANDBOX_GVISOR=1 bash scripts/setup.sh` installs and "
                         "registers it")
    if name not in known:
        raise SetupError(f"--runtime {name!r}: the Docker engine has no such runtime (it has: "
                         f"{', '.join(sorted(known))}); see docs/backends/index.md ('Where sandboxes run')")
    return name, is_gvisor_program(known[name])


def forget() -> None:
    with _lock:
        _known.clear()


def failed_to_boot(message: str) -> bool:
    """gVisor could not boot the sandbox, for no reason of the sandbox's own (worth a fresh try)."""
    return any(w in message for w in _BOOT_FAILURES)
