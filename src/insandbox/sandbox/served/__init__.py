"""A sandbox service that outlives a run (`insandbox pool serve`): service.py keeps sandboxes ready and
runs what clients ask of them, http.py is its API, client.py is a command's side (`--pool-url`),
protocol.py what both share."""
from __future__ import annotations

from typing import Optional

from ..base import SandboxSpec


def make_pool(spec: SandboxSpec, backend: str, pool_url: Optional[str], **kwargs):
    """A pool for a session's sandboxes: the service's at `pool_url`, else a SandboxPool of this process."""
    if pool_url:
        from .client import ServedPool

        return ServedPool(pool_url, spec, backend)
    from ..pool import SandboxPool

    return SandboxPool(spec, backend, **kwargs)
