"""The seccomp filter of every bwrap sandbox: a classic BPF program, built here, that bwrap installs
(`--seccomp FD`) just before it starts the sandbox's init; every process of the sandbox inherits it.

In the spirit of Docker's default profile for a container without extra capabilities, but written as
a deny list over the syscalls this file knows (the kernel's numbering up to file_setattr, Linux 6.17),
with everything numbered past them refused as ENOSYS (a syscall newer than this table, such as
listns, is unknown to us: libc falls back as on an older kernel). Denied with EPERM, as Docker does,
never a kill:

- the kernel's keyrings: keyctl, add_key, request_key (Kerberos and AFS tokens live there);
- the kernel and the machine: kernel modules (init/finit/delete_module and the old create_module,
  get_kernel_syms, query_module), kexec_load, kexec_file_load, reboot, swapon, swapoff, setting
  the clock (settimeofday, clock_settime), acct, quotactl, quotactl_fd, syslog, iopl, ioperm,
  vhangup, nfsservctl, lookup_dcookie, sysfs, _sysctl, uselib, ustat, afs_syscall and the other
  never-implemented slots (getpmsg, putpmsg, tuxcall, security, vserver);
- mounts, in either API: mount, umount2, pivot_root, open_tree, open_tree_attr, move_mount, fsopen,
  fsconfig, fsmount, fspick, mount_setattr, statmount, listmount;
- namespaces: setns, unshare, clone with any CLONE_NEW* flag, sethostname, setdomainname; clone3
  gets ENOSYS (its flags sit in memory a filter cannot read), so libc falls back to clone, whose
  flags the filter does check;
- the kernel's attack surface beyond a container's: bpf, perf_event_open, userfaultfd, io_uring_*,
  fanotify_init, open_by_handle_at, name_to_handle_at, other processes' memory and descriptors
  beyond ptrace (kcmp, pidfd_getfd, process_madvise), NUMA placement (mbind, get/set_mempolicy,
  set_mempolicy_home_node, migrate_pages, move_pages);
- personality() other than Linux's own few (0, PER_LINUX32, UNAME26 and the query 0xffffffff):
  no turning off address-space randomisation;
- socket(AF_VSOCK): vsock is not namespaced; it reaches the hypervisor of a virtual machine.

Every syscall of a foreign ABI is denied: i386 and x32 on x86_64, AArch32 on aarch64. Only x86_64
and aarch64 have tables here; on any other machine bwrap sandboxes refuse to start (`unsupported`).
The numbers of x86_64 are those of asm/unistd_64.h, those of aarch64 the kernel's generic table
(asm-generic/unistd.h, scripts/syscall.tbl); tests/sandbox/bwrap/test_seccomp.py compares both with
the headers of the machine.

The host checks from outside that the sandbox's init runs under it (`refusal`): /proc/<pid>/status
says `Seccomp: 2`, `NoNewPrivs: 1`, and one filter more than this process has itself.
"""
from __future__ import annotations

import errno
import functools
import os
import platform
import struct
from typing import Optional

# seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian on both machines)
NR, ARCH, ARG0_LOW = 0, 4, 16
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}  # EM_* | 64-bit | little-endian
X32_SYSCALL_BIT = 0x40000000
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
# classic BPF opcodes
LD_ABS, JEQ, JGE, JGT, JSET, RET = 0x20, 0x15, 0x35, 0x25, 0x45, 0x06

CLONE_NAMESPACES = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
AF_VSOCK = 40
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)  # PER_LINUX, PER_LINUX32, UNAME26, both, query
LAST_KNOWN = 469  # file_setattr (Linux 6.17): numbers past it are refused as ENOSYS

# name: (x86_64, aarch64); None where the machine has no such syscall
SYSCALLS: dict[str, tuple[Optional[int], Optional[int]]] = {
    "add_key": (248, 217), "request_key": (249, 218), "keyctl": (250, 219),
    "create_module": (174, None), "init_module": (175, 105), "delete_module": (176, 106),
    "get_kernel_syms": (177, None), "query_module": (178, None), "finit_module": (313, 273),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "reboot": (169, 142),
    "swapon": (167, 224), "swapoff": (168, 225), "settimeofday": (164, 170), "clock_settime": (227, 112),
    "acct": (163, 89), "quotactl": (179, 60), "quotactl_fd": (443, 443), "syslog": (103, 116),
    "iopl": (172, None), "ioperm": (173, None), "vhangup": (153, 58), "nfsservctl": (180, 42),
    "lookup_dcookie": (212, 18), "sysfs": (139, None), "_sysctl": (156, None), "uselib": (134, None),
    "ustat": (136, None), "afs_syscall": (183, None), "getpmsg": (181, None), "putpmsg": (182, None),
    "tuxcall": (184, None), "security": (185, None), "vserver": (236, None),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "open_tree": (428, 428),
    "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432),
    "fspick": (433, 433), "mount_setattr": (442, 442), "statmount": (457, 457), "listmount": (458, 458),
    "open_tree_attr": (467, 467),
    "setns": (308, 268), "unshare": (272, 97), "sethostname": (170, 161), "setdomainname": (171, 162),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "fanotify_init": (300, 262), "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
    "kcmp": (312, 272), "pidfd_getfd": (438, 438), "process_madvise": (440, 440),
    "mbind": (237, 235), "get_mempolicy": (239, 236), "set_mempolicy": (238, 237),
    "set_mempolicy_home_node": (450, 450), "migrate_pages": (256, 238), "move_pages": (279, 239),
    # checked on their arguments, or answered otherwise
    "clone": (56, 220), "clone3": (435, 435), "socket": (41, 198), "personality": (135, 92),
}
CHECKED = ("clone", "clone3", "socket", "personality")
DENIED = tuple(name for name in SYSCALLS if name not in CHECKED)


def machine() -> str:
    return platform.machine()


def unsupported(arch: Optional[str] = None) -> str:
    """Why this machine's sandboxes cannot have the filter ("" when they can)."""
    arch = arch or machine()
    if arch in AUDIT_ARCH:
        return ""
    return (f"the bwrap backend's seccomp filter knows x86_64 and aarch64 only, not {arch}: "
            f"it does not start sandboxes without one")


def number(name: str, arch: Optional[str] = None) -> Optional[int]:
    return SYSCALLS[name][0 if (arch or machine()) == "x86_64" else 1]


class _Program:
    """Instructions with symbolic jump targets, resolved once all are placed."""

    def __init__(self) -> None:
        self.code: list[tuple[int, object, object, int]] = []
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int, jt: object = 0, jf: object = 0) -> None:
        self.code.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        out = b""
        for i, (code, jt, jf, k) in enumerate(self.code):
            offs = [self.labels[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf)]
            if not all(0 <= o <= 255 for o in offs):  # forward, within one byte
                raise ValueError(f"seccomp: jump out of reach at instruction {i}")
            out += struct.pack("=HBBI", code, offs[0], offs[1], k & 0xFFFFFFFF)
        return out


@functools.cache
def program(arch: Optional[str] = None) -> bytes:
    """The filter for this machine (or `arch`), as the struct sock_filter array bwrap reads."""
    arch = arch or machine()
    why = unsupported(arch)
    if why:
        raise ValueError(why)
    p = _Program()
    p.op(LD_ABS, ARCH)
    p.op(JEQ, AUDIT_ARCH[arch], 0, "deny")  # i386 on x86_64, AArch32 on aarch64
    p.op(LD_ABS, NR)
    if arch == "x86_64":
        p.op(JGE, X32_SYSCALL_BIT, "deny", 0)  # the x32 ABI: x86_64's arch, its own numbers
    p.op(JGT, LAST_KNOWN, "enosys", 0)
    p.op(JEQ, number("clone", arch), "clone", 0)
    p.op(JEQ, number("clone3", arch), "enosys", 0)
    p.op(JEQ, number("socket", arch), "socket", 0)
    p.op(JEQ, number("personality", arch), "personality", 0)
    for nr in sorted({number(name, arch) for name in DENIED} - {None}):
        p.op(JEQ, nr, "deny", 0)
    p.op(RET, RET_ALLOW)
    # classic BPF jumps forward only: the argument checks, then the answers they jump to
    p.label("clone")
    p.op(LD_ABS, ARG0_LOW)  # clone's flags: the kernel reads their lower 32 bits only
    p.op(JSET, CLONE_NAMESPACES, "deny", "allow")
    p.label("socket")
    p.op(LD_ABS, ARG0_LOW)
    p.op(JEQ, AF_VSOCK, "deny", "allow")
    p.label("personality")
    p.op(LD_ABS, ARG0_LOW)  # an unsigned int for the kernel
    for persona in PERSONALITIES:
        p.op(JEQ, persona, "allow", 0)
    p.label("deny")  # any other persona falls through to here
    p.op(RET, RET_ERRNO | errno.EPERM)
    p.label("enosys")
    p.op(RET, RET_ERRNO | errno.ENOSYS)
    p.label("allow")
    p.op(RET, RET_ALLOW)
    return p.assemble()


def pipe_with(data: bytes) -> int:
    """A pipe's read end (inheritable) holding `data`, the write end closed: bwrap reads to EOF."""
    r, w = os.pipe()
    try:
        os.write(w, data)  # a few hundred bytes: far below a pipe's buffer
    finally:
        os.close(w)
    return r


def status_fields(text: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def refusal(init_status: str, own_status: str) -> str:
    """Why a sandbox's init (its /proc/<pid>/status) does not run under our filter ("" when it does):
    seccomp in filter mode, no-new-privileges, and one filter more than this process (which may itself
    run under a container's filter) has."""
    init, own = status_fields(init_status), status_fields(own_status)
    if init.get("Seccomp") != "2":
        return f"the sandbox's init runs without a seccomp filter (Seccomp: {init.get('Seccomp', 'absent')})"
    if init.get("NoNewPrivs") != "1":
        return f"the sandbox's init may gain privileges (NoNewPrivs: {init.get('NoNewPrivs', 'absent')})"
    if "Seccomp_filters" in init:
        mine = int(own.get("Seccomp_filters", "0") or 0)
        if int(init["Seccomp_filters"] or 0) <= mine:
            return f"the sandbox's init has no filter of its own ({init['Seccomp_filters']} filters, as this process)"
    return ""
