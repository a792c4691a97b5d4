"""The seccomp filter's program, read by a small classic-BPF interpreter of this test's own (what the
kernel would answer for a syscall), its syscall tables against this machine's kernel headers, and the
host's check of a sandbox's init on /proc status texts."""
from __future__ import annotations

import errno
import re
import struct
from pathlib import Path

import pytest

from insandbox.sandbox.bwrap import seccomp

AUDIT_ARCH_I386, AUDIT_ARCH_ARM = 0x40000003, 0x40000028
ALLOW, EPERM, ENOSYS = seccomp.RET_ALLOW, seccomp.RET_ERRNO | errno.EPERM, seccomp.RET_ERRNO | errno.ENOSYS
HEADERS = {"x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
           "aarch64": Path("/usr/include/asm-generic/unistd.h")}


def evaluate(program: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """What the kernel's classic BPF would return for this seccomp_data (the opcodes the builder uses;
    any other one fails the test)."""
    args = (tuple(args) + (0,) * 6)[:6]
    data = struct.pack("<iIQ6Q", nr, arch, 0x1000, *args)
    code = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        pc += 1
        if op == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
        elif op == 0x06:  # ret k
            return k
        elif op in (0x15, 0x25, 0x35, 0x45):  # jeq, jgt, jge, jset
            taken = {0x15: acc == k, 0x25: acc > k, 0x35: acc >= k, 0x45: bool(acc & k)}[op]
            pc += jt if taken else jf
        else:
            raise AssertionError(f"unexpected opcode {op:#x}")


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_what_the_filter_answers(arch):
    prog, audit = seccomp.program(arch), seccomp.AUDIT_ARCH[arch]
    assert len(prog) % 8 == 0 and len(prog) // 8 < 128  # a few dozen instructions, under BPF's jump reach

    def nr(name):
        return seccomp.number(name, arch)

    for name in seccomp.DENIED:
        if nr(name) is not None:
            assert evaluate(prog, nr(name), audit) == EPERM, name
    for name in ("add_key", "keyctl", "request_key", "mount", "setns", "unshare", "bpf", "io_uring_setup"):
        assert name in seccomp.DENIED
    allowed = {"x86_64": {"read": 0, "write": 1, "openat": 257, "mmap": 9, "execve": 59, "ptrace": 101,
                          "wait4": 61, "chroot": 161, "uretprobe": 335, "fchmodat2": 452, "mseal": 462},
               "aarch64": {"read": 63, "write": 64, "openat": 56, "mmap": 222, "execve": 221, "ptrace": 117,
                           "wait4": 260, "chroot": 51, "fchmodat2": 452, "mseal": 462}}[arch]
    for name, number in allowed.items():
        assert evaluate(prog, number, audit) == ALLOW, name
    # clone: threads and fork pass, any new namespace does not; only the flags' lower half counts
    assert evaluate(prog, nr("clone"), audit, (0x003D0F00,)) == ALLOW  # pthread_create's flags
    assert evaluate(prog, nr("clone"), audit, (0x01200011,)) == ALLOW  # fork's
    assert evaluate(prog, nr("clone"), audit, (0xFFFFFFFF00000011,)) == ALLOW
    for flag in (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000):
        assert evaluate(prog, nr("clone"), audit, (0x11 | flag,)) == EPERM, hex(flag)
    assert evaluate(prog, nr("clone3"), audit) == ENOSYS  # libc falls back to clone
    assert evaluate(prog, nr("socket"), audit, (2,)) == ALLOW and evaluate(prog, nr("socket"), audit, (40,)) == EPERM
    for persona in (0, 8, 0x20000, 0x20008, 0xFFFFFFFF):
        assert evaluate(prog, nr("personality"), audit, (persona,)) == ALLOW
    for persona in (0x0040000, 0x0400000, 0x0040008):  # ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC
        assert evaluate(prog, nr("personality"), audit, (persona,)) == EPERM
    assert evaluate(prog, seccomp.LAST_KNOWN + 1, audit) == ENOSYS  # newer than this table: unknown
    # a foreign ABI: denied whatever the syscall
    foreign = AUDIT_ARCH_I386 if arch == "x86_64" else AUDIT_ARCH_ARM
    for number in (0, 3, 11, 120, nr("keyctl")):
        assert evaluate(prog, number, foreign) == EPERM
    if arch == "x86_64":
        for number in (0, 1, 250, 512):  # x32: x86_64's arch, its numbers with the x32 bit
            assert evaluate(prog, number | 0x40000000, audit) == EPERM


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_the_tables_match_this_machines_kernel_headers(arch):
    """x86_64: asm/unistd_64.h; aarch64: the kernel's generic table. The headers here are older than
    some syscalls of the table (Linux 6.1's): those must be numbered past the headers' last one."""
    text = HEADERS[arch].read_text()
    found = {m[0]: int(m[1]) for m in re.findall(r"#define __NR(?:3264)?_(\w+)\s+(\d+)\b", text)}
    last = max(found.values())
    assert last >= 435  # a header of the unified numbering (clone3 and later)
    for name in seccomp.SYSCALLS:
        ours = seccomp.number(name, arch)
        if name in found:
            assert ours == found[name], name
        elif ours is not None:
            assert ours > last, f"{name}: {ours} is not in {HEADERS[arch]}"
    assert seccomp.LAST_KNOWN > last


def test_other_machines_are_refused_in_one_line():
    why = seccomp.unsupported("riscv64")
    assert "riscv64" in why and "\n" not in why
    assert seccomp.unsupported("x86_64") == "" == seccomp.unsupported("aarch64")
    with pytest.raises(ValueError, match="riscv64"):
        seccomp.program("riscv64")


STATUS = "Name:\tpython3\nNoNewPrivs:\t{nnp}\nSeccomp:\t{mode}\nSeccomp_filters:\t{filters}\n"


def test_the_host_refuses_an_init_without_the_filter():
    own = STATUS.format(nnp=0, mode=0, filters=0)
    assert seccomp.refusal(STATUS.format(nnp=1, mode=2, filters=1), own) == ""
    assert "without a seccomp filter" in seccomp.refusal(STATUS.format(nnp=1, mode=0, filters=0), own)
    assert "Seccomp: absent" in seccomp.refusal("Name:\tx\n", own)
    assert "NoNewPrivs: 0" in seccomp.refusal(STATUS.format(nnp=0, mode=2, filters=1), own)
    # this process already runs under a filter (in a container): the sandbox's init needs one more
    inside = STATUS.format(nnp=1, mode=2, filters=1)
    assert "no filter of its own" in seccomp.refusal(STATUS.format(nnp=1, mode=2, filters=1), inside)
    assert seccomp.refusal(STATUS.format(nnp=1, mode=2, filters=2), inside) == ""
