"""The bwrap backend: sandboxes without a container engine and without root (bubblewrap, a user
namespace and overlayfs), the in-sandbox server of ../guest/ as their PID 1.

    backend.py    BwrapSandbox: the Sandbox protocol (lifetime, commands), what it declares it cannot do
    launch.py     a sandbox's folder on the host, its limits and its command line
    hostside.py   its files from the host side, through its root (big files, copy-in, a busy or dead server)
    ../rootfs.py  the image's files on this host: exported from Docker, unpacked from a tar, cached
"""
from .backend import LIVE, BwrapSandbox, find_rootfs

__all__ = ["LIVE", "BwrapSandbox", "find_rootfs"]
