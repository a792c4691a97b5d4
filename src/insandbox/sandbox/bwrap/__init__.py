"""The bwrap backend: sandboxes without a container engine and without root (bubblewrap, a user
namespace and overlayfs), the in-sandbox server of ../guest/ as their PID 1.

    backend.py    BwrapSandbox: the Sandbox protocol (lifetime, commands), what it declares it cannot do
    launch.py     a sandbox's folder on the host, its limits and its command line (what it sees of the host)
    seccomp.py    the seccomp filter every sandbox runs under, and the host's check that it does
    cgroup.py     its cgroup where this user may make one: memory in all, pids, CPUs, facts read from outside
    network.py    its network by mode (slirp4netns for bridge)
    hostside.py   its files from the host side, through its root (big files, copy-in, a busy or dead server)
    ../rootfs.py  the image's files on this host: exported from Docker, unpacked from a tar, cached
"""
from .backend import LIVE, BwrapSandbox, find_rootfs

__all__ = ["LIVE", "BwrapSandbox", "find_rootfs"]
