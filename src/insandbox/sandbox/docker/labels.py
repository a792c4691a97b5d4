"""How the Docker backend marks its containers, and whose each one is.

Every container insandbox creates carries `insandbox=1`, the run id, and its owner: the host, pid and
start time of the process that created it (../owner.py), so `insandbox clean` can tell a container
whose process is gone from one still in use (a pid alone may be reused by an unrelated process).
"""
from __future__ import annotations

from ..owner import owner_gone, owner_label, process_start  # noqa: F401 (re-exported: the labels' owner)

LABEL = "insandbox"  # every container we create carries insandbox=1
LABEL_RUN = "insandbox.run_id"
LABEL_OWNER = "insandbox.owner"  # "<hostname>:<pid>:<process start time>" of the process that created it
LABEL_CREATED = "insandbox.created"
