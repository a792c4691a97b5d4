"""The Docker backend: one container per sandbox, the in-container server (../guest/) as its PID 1.

    backend.py    DockerSandbox: the Sandbox protocol on a container (lifetime, commands, recycling)
    files.py      its files: stat, read, write, copy in and copy-back
    labels.py     how containers are labelled and whose they are
    engine.py     the connection to the engine, shared by the process
    channel.py    the attach stream to the server
    limits.py     the container settings behind SandboxLimits; disk.py, a disk of its own
    etc_files.py  /etc/hosts, resolv.conf, hostname (read-only, ours); netfilter.py, packet filters
    recycle.py    putting a used container's filesystem back; snapshot.py, fork
    image.py      building the image (image/); proxy.py, the registries proxy
    cleanup.py    what `insandbox clean` removes; archive.py, tar streams to and from the engine
"""
from .backend import (
    LABEL,
    LABEL_CREATED,
    LABEL_OWNER,
    LABEL_RUN,
    LIVE,
    UNISOLATED_ENV,
    UNREMOVED,
    DockerSandbox,
    ImageNotFound,
    isolation_unavailable,
    owner_label,
    process_start,
)

__all__ = ["LABEL", "LABEL_CREATED", "LABEL_OWNER", "LABEL_RUN", "LIVE", "UNISOLATED_ENV", "UNREMOVED",
           "DockerSandbox", "ImageNotFound", "isolation_unavailable", "owner_label", "process_start"]
