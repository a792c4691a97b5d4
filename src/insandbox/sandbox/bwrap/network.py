"""A bwrap sandbox's network, by mode:

- `none`: a network namespace of its own with only loopback;
- `bridge`: the same namespace, given a way out by slirp4netns, a user-mode TCP/IP stack that runs as
  this user and makes the sandbox's connections from this machine (NAT at 10.0.2.2, its DNS forwarder at
  10.0.2.3), with this machine's loopback refused (--disable-host-loopback): the internet and PyPI, not
  the model server on 127.0.0.1, not the other sandboxes (each has its namespace and its slirp4netns);
  what listens on this machine's other addresses is reachable, as from Docker's bridge. Nothing gets
  in: slirp4netns forwards no port (none is given, and without --api-socket none can be added later);
  Docker's and Podman's sandboxes, which its connections reach from their gateway, let nothing new in
  (docker/netfilter.py);
- `host`: this machine's network namespace (--share-net): everything, the model server included.

The network namespace is the launcher's (launch.py), made beside the user namespace it owns, and
bwrap shares it (--share-net): the sandbox's processes live user namespaces further in, with no say
over it. slirp4netns enters it through its owner, asked of the network namespace itself
(NS_GET_USERNS). It exits when the pipe this process holds closes (--exit-fd): at close, and when
this process dies.
"""
from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import subprocess
from typing import Optional

from ..base import SandboxError

NS_GET_USERNS = 0xB701  # _IO(0xb7, 0x1)
GATEWAY, DNS = "10.0.2.2", "10.0.2.3"
RESOLV_CONF = f"# slirp4netns's forwarder to this machine's resolver\nnameserver {DNS}\n"


def slirp_missing() -> Optional[str]:
    if shutil.which("slirp4netns") is None:
        return "slirp4netns is not installed (Debian: apt-get install slirp4netns)"
    if not os.access("/dev/net/tun", os.R_OK | os.W_OK):
        return "/dev/net/tun is not usable by this user"
    return None


class Slirp:
    """One sandbox's slirp4netns."""

    def __init__(self) -> None:
        self.proc: Optional[subprocess.Popen] = None
        self._exit_w: Optional[int] = None

    async def start(self, init_pid: int, timeout: float = 30.0) -> None:
        await asyncio.to_thread(self._start, init_pid, timeout)

    def _start(self, init_pid: int, timeout: float) -> None:
        netfd = os.open(f"/proc/{init_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            userfd = fcntl.ioctl(netfd, NS_GET_USERNS)
        finally:
            os.close(netfd)
        ready_r, ready_w = os.pipe()
        exit_r, self._exit_w = os.pipe()
        os.set_inheritable(self._exit_w, False)
        try:
            self.proc = subprocess.Popen(
                ["slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback", "--enable-sandbox",
                 "--enable-seccomp", f"--ready-fd={ready_w}", f"--exit-fd={exit_r}",
                 f"--userns-path=/proc/self/fd/{userfd}", str(init_pid), "tap0"],
                pass_fds=(ready_w, exit_r, userfd), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, start_new_session=True)
        finally:
            for fd in (ready_w, exit_r, userfd):
                os.close(fd)
        try:
            import select

            ready, _, _ = select.select([ready_r], [], [], timeout)
            ok = bool(ready) and os.read(ready_r, 1) == b"1"
        finally:
            os.close(ready_r)
        if not ok:
            self.stop()
            err = self.proc.stderr.read().decode(errors="replace") if self.proc and self.proc.stderr else ""
            lines = [line for line in err.splitlines() if "experimental" not in line]
            raise SandboxError("slirp4netns could not give the sandbox its network: "
                               + (" ".join(" ".join(lines).split())[-300:] or "it did not say why"))
        self.proc.stderr.close()

    def kill(self) -> None:
        """At a forced exit: at once, without waiting."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()

    def stop(self) -> None:
        if self._exit_w is not None:
            os.close(self._exit_w)  # it exits when this closes
            self._exit_w = None
        if self.proc is not None:
            try:
                self.proc.wait(2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
