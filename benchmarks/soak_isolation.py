"""Soak of recycled sandboxes under attack: does anything of one sample reach a later one?

    .venv/bin/python benchmarks/soak_isolation.py [--samples 1000] [--pool 4] [--json out.json]

Samples run through one SandboxPool with recycling, `--pool` at a time. Each sample, in its container:
1. looks at everything a later sample could notice (LOOK: processes, files where a sample may write,
   /etc and site-packages, /dev and its times, the server's settings as /proc/1 shows them, sockets,
   IPC, free disk, the shell's state) and compares it with what a fresh container shows;
2. writes its own answer, waits, and reads it back (a process left by an earlier sample could rewrite it);
3. runs one attack from a rotating list (ATTACKS: this round's classes and the last rounds'), then is
   released: recycled for a later sample, or discarded where the host's reset check refuses it.

Printed: per attack, how many samples ran it, how many later samples saw an effect (any difference
from the fresh look, a rewritten answer), how many containers the reset refused. Exit status 1 when a
later sample saw any effect.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import time
from pathlib import Path

from insandbox.sandbox import SandboxLimits, SandboxSpec
from insandbox.sandbox.pool import SandboxPool

IMAGE = "insandbox:latest"
DISK_SLACK = 1 << 20

LOOK = r"""python3 - <<'PY'
import hashlib, json, os, stat, sys
me = os.getpid()
def tree(root, skip=()):
    h, n = hashlib.sha256(), 0
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if os.path.join(top, d) not in skip)
        for name in sorted(dirs + files):
            p = os.path.join(top, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            row = [p, st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns, st.st_nlink]
            if stat.S_ISREG(st.st_mode) and st.st_size < 1 << 20:
                try:
                    row.append(hashlib.sha256(open(p, "rb").read()).hexdigest())
                except OSError:
                    row.append("?")
            elif stat.S_ISLNK(st.st_mode):
                row.append(os.readlink(p))
            h.update(repr(row).encode()); n += 1
    return "%d:%s" % (n, h.hexdigest()[:16])
def read(p):
    try:
        return open(p).read().strip()
    except OSError as e:
        return "error %s" % e.errno
procs = []
for d in os.listdir("/proc"):
    if d.isdigit() and int(d) not in (me, os.getppid()):
        procs.append(read("/proc/%s/comm" % d))
dev = []
for name in sorted(os.listdir("/dev")):
    st = os.lstat("/dev/" + name)
    dev.append([name, st.st_mode, st.st_uid, st.st_atime_ns, st.st_mtime_ns])
import site
st = os.statvfs("/")
out = {
    "processes": sorted(procs),
    "files": {r: tree(r) for r in ("/testbed", "/tmp", "/var/tmp", "/root", "/dev/shm", "/dev/mqueue", "/home",
                                   "/etc", "/usr/local", "/opt", "/srv")},
    "site-packages": {p: tree(p) for p in site.getsitepackages() if os.path.isdir(p)},
    "dev": dev,
    "init": {k: read("/proc/1/" + k) for k in ("coredump_filter", "oom_score_adj", "limits", "comm")},
    "init-status": [l for l in read("/proc/1/status").splitlines()
                    if l.split(":")[0] in ("Cpus_allowed_list", "NoNewPrivs", "CapEff", "Seccomp")],
    "init-nice": read("/proc/1/stat").rsplit(")", 1)[1].split()[16],
    "sockets": {n: len(read("/proc/net/" + n).splitlines()) for n in ("tcp", "tcp6", "udp", "udp6", "raw")},
    "ipc": {n: len(read("/proc/sysvipc/" + n).splitlines()) for n in ("shm", "msg", "sem")},
    "env": sorted(os.environ),
    "free": st.f_bavail * st.f_frsize,
}
print("LOOK " + json.dumps(out, sort_keys=True))
PY
echo "cwd $PWD"; type leak_fn 2>&1 | head -1; alias 2>&1 | head -1"""

# One line each: what a hostile sample does, aiming at the next sample of the same container.
ATTACKS = {
    "zombie leader rewriting the answer (raw exit of the main thread)": r"""cat > /tmp/z.py <<'PY'
import ctypes, platform, threading, time
def w():
    while True:
        try:
            open('/testbed/answer.txt', 'w').write('POISONED')
        except OSError:
            pass
        time.sleep(0.05)
threading.Thread(target=w).start(); time.sleep(0.2)
ctypes.CDLL(None).syscall({'x86_64': 60, 'aarch64': 93}[platform.machine()], 0)
PY
nohup python3 /tmp/z.py >/dev/null 2>&1 & sleep 0.5""",
    "detached writers (nohup, setsid, double fork)": "nohup sh -c 'while :; do echo P > /testbed/answer.txt; "
                                                    "sleep 0.1; done' >/dev/null 2>&1 & setsid sleep 999 & "
                                                    "(sh -c 'sleep 998 &' &) ; sleep 0.2",
    ".pth planted in site-packages": "printf 'import os; open(\"/testbed/answer.txt\", \"w\").write(\"P\")\\n' > "
                                     "$(python3 -c 'import site; print(site.getsitepackages()[0])')/zz.pth",
    "image files touched (copies fill the disk)": "find /usr/lib -type f -size +32k | head -n 1500 | "
                                                  "xargs -d '\\n' touch -a",
    "/dev times written": "touch -a -d 2001-01-01 /dev/null; touch -m -d 2002-02-02 /dev/zero; "
                          "touch -h -d 2003-03-03 /dev/stdin; touch -d 2004-04-04 /dev/shm",
    "the server's settings (core dump filter, OOM score, limits, nice, affinity)":
        "echo 7f > /proc/1/coredump_filter; echo 900 > /proc/1/oom_score_adj; prlimit --pid 1 --nofile=2000:; "
        "renice -n 5 -p 1 >/dev/null; taskset -p -c 0 1 >/dev/null 2>&1; true",
    "TIME_WAIT sockets": "python3 -c 'import socket\nfor p in range(20):\n s=socket.socket(); "
                         "s.bind((\"127.0.0.1\",0)); s.listen(); c=socket.create_connection(s.getsockname()); "
                         "a,_=s.accept(); c.close(); a.close()'",
    "IPC and in-memory files": "ipcmk -M 4096 >/dev/null; ipcmk -Q >/dev/null; echo x > /dev/shm/leak; "
                               "python3 -c 'import os; os.mkfifo(\"/tmp/fifo\")'",
    "files everywhere (etc, root, tmp, links out, xattrs)": "echo 'intruder:x:0:0::/:/bin/sh' >> /etc/passwd; "
                                                           "mkdir -p /root/.cache/x; echo x > /tmp/x; "
                                                           "ln -s / /testbed/up; ln /usr/bin/env /testbed/hl; "
                                                           "setfattr -n user.x -v 1 /testbed 2>/dev/null; "
                                                           "echo 'echo P > /testbed/answer.txt' >> /etc/bash.bashrc",
    "shell state (exports, functions, aliases, cwd)": "export LEAK=1; leak_fn() { :; }; alias leak=true; cd /tmp",
    "fork bomb left running": "(:(){ :|:& };:) >/dev/null 2>&1 & sleep 1",
    "memory hog left running": "nohup python3 -c 'b=bytearray(300<<20); import time; time.sleep(999)' "
                               ">/dev/null 2>&1 & sleep 0.5",
    "a listening server left behind": "nohup python3 -m http.server 8000 >/dev/null 2>&1 & sleep 0.5",
}


def differences(look: dict, fresh: dict) -> list[str]:
    out = []
    for key in sorted(set(look) | set(fresh)):
        if key == "free":
            if abs(look.get(key, 0) - fresh.get(key, 0)) > DISK_SLACK:
                out.append(f"free disk {fresh.get(key)} -> {look.get(key)}")
        elif look.get(key) != fresh.get(key):
            out.append(key)
    return out


def parse(output: str) -> tuple[dict, list[str]]:
    lines = output.splitlines()
    look = next((json.loads(line[5:]) for line in lines if line.startswith("LOOK ")), None)
    rest = [line for line in lines if not line.startswith("LOOK ")]
    return look or {}, rest


async def sample(pool: SandboxPool, i: int, fresh: dict, stats: dict) -> None:
    attack = list(ATTACKS)[i % len(ATTACKS)]
    try:
        sb = await pool.acquire()
    except Exception as e:  # the engine failed a start (it does under heavy load): counted, not an effect
        stats["start_errors"].append(f"sample {i}: {type(e).__name__}: {e}"[:300])
        return
    reusable = True
    try:
        look, rest = parse((await sb.run(LOOK, timeout=120)).output)
        if sb.uses == 1:  # a fresh container: what each of its later samples must find again
            fresh[id(sb)] = (look, rest)
        seen = []
        if sb.uses > 1:
            first, first_rest = fresh[id(sb)]
            seen = differences(look, first) + ([f"shell state {rest}"] if rest != first_rest else [])
        own = f"sample-{i}"
        await sb.run(f"echo {own} > /testbed/answer.txt; sleep 0.3")
        answer = (await sb.read_file("/testbed/answer.txt")).decode().strip()
        if answer != own:
            seen.append(f"answer rewritten: {answer!r}")
        if seen:
            after = getattr(sb, "last_attack", "?")
            stats["effects"][after] += 1
            stats["seen"].append({"sample": i, "after": after, "what": seen})
        await sb.run(ATTACKS[attack], timeout=30)
        sb.last_attack = attack
        stats["ran"][attack] += 1
    except Exception as e:  # the sandbox broke under its own attack: not reused
        stats["errors"].append(f"sample {i} ({attack}): {type(e).__name__}: {e}"[:300])
        reusable = False
    finally:
        pool.release(sb, reusable=reusable)


async def soak(n: int, size: int) -> dict:
    spec = SandboxSpec(image=IMAGE, run_id="soak-isolation", limits=SandboxLimits(disk="2g", network="none"))
    stats = {"ran": collections.Counter(), "effects": collections.Counter(), "seen": [], "errors": [],
             "start_errors": []}
    fresh: dict = {}  # sandbox -> what it showed its first sample
    t0 = time.monotonic()
    async with SandboxPool(spec, size=size, max_uses=10_000) as pool:
        pool.expect(n)
        slots = asyncio.Semaphore(size)

        async def one(i):
            async with slots:
                await sample(pool, i, fresh, stats)

        await asyncio.gather(*(one(i) for i in range(n)))
        stats["pool"] = pool.stats.summary()
    stats["seconds"] = round(time.monotonic() - t0, 1)
    return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--pool", type=int, default=4, help="samples at once (and sandboxes in the pool)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    stats = asyncio.run(soak(args.samples, args.pool))
    print(f"{args.samples} samples, {args.pool} at a time, {stats['seconds']} s; pool: {stats['pool']}")
    print("| attack | samples | effects on a later sample |\n|---|---|---|")
    for attack in ATTACKS:
        print(f"| {attack} | {stats['ran'][attack]} | {stats['effects'][attack]} |")
    total = sum(stats["effects"].values())
    print(f"effects on later samples: {total}; containers not reused: {stats['pool']['recycle_failures']}; "
          f"samples that broke their own sandbox: {len(stats['errors'])}; sandboxes the engine failed to start: "
          f"{len(stats['start_errors'])}")
    for seen in stats["seen"][:10]:
        print("  seen:", seen)
    for err in stats["errors"][:5]:
        print("  error:", err)
    if args.json:
        args.json.write_text(json.dumps({**stats, "ran": dict(stats["ran"]), "effects": dict(stats["effects"])},
                                        indent=1))
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
