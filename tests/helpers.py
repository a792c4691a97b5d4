"""Helpers shared by the tests (not fixtures): the CLI, containers by label, the development data.

Nothing here touches Docker or ../shared when imported, so pure-function tests run anywhere."""
from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=1)
def shared_data() -> Path:
    """The development data sets (../shared/data beside the checkout); never shipped with the product.
    A test that needs them fails (never skips) when they are missing. INSANDBOX_SHARED_DATA set to
    an empty value means "there are none" (to prove the pure tests do without)."""
    if os.environ.get("INSANDBOX_SHARED_DATA") == "":
        raise RuntimeError("development data switched off (INSANDBOX_SHARED_DATA is empty)")
    for cand in (os.environ.get("INSANDBOX_SHARED_DATA"), REPO.parent / "shared" / "data", Path("/work/shared/data")):
        if cand and (Path(cand) / "bench").is_dir():
            # IFBench's checks tokenize with NLTK; offline, point NLTK at the copies of its data
            os.environ.setdefault("NLTK_DATA", str(Path(cand) / "nltk_data"))
            return Path(cand)
    raise RuntimeError("development data not found: set INSANDBOX_SHARED_DATA to the shared/data folder")


def cli(*args: str, env: dict | None = None, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    """Run the installed `insandbox` command."""
    exe = Path(sys.executable).parent / "insandbox"
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, env=full_env, **kw)


def containers_with_label(label: str) -> list[str]:
    """Containers carrying the label; raises when the Docker CLI fails (an empty answer must mean none)."""
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={label}"], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"docker ps failed ({out.returncode}): {out.stderr.strip()}")
    return out.stdout.split()


def owner_of(pid: int) -> str:
    """The owner label insandbox gives the sandboxes of process `pid`."""
    from insandbox.sandbox.docker import LABEL_OWNER, process_start

    return f"{LABEL_OWNER}={os.uname().nodename}:{pid}:{process_start(pid)}"
