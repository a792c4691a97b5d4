"""Isolation between samples that reuse one container (the pool's recycling), on real recycled
containers: a sample attacks the in-container server (PID 1), its settings, the in-memory mounts,
System V IPC and the image's metadata; the next sample must find everything as in a fresh sandbox,
or the container must have been discarded (fail closed), never reused in a state it cannot vouch for."""
from __future__ import annotations

import json

import pytest

from insandbox.sandbox import SandboxError, SandboxLimits, SandboxSpec
from insandbox.sandbox.pool import SandboxPool
from tests.helpers import containers_with_label

# every way a process of the sandbox could reach into the server, each reported as "denied" or how it got in
REACH_PID1 = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "got in"
    except OSError as e:
        out[name] = "denied" if e.errno in (1, 13) else "error %d" % e.errno
def ptrace():
    if libc.ptrace(16, 1, None, None) != 0:  # PTRACE_ATTACH
        raise OSError(ctypes.get_errno(), "ptrace")
    libc.ptrace(17, 1, None, None)
attempt("mem_read", lambda: open("/proc/1/mem", "rb").close())
attempt("mem_write", lambda: open("/proc/1/mem", "r+b").close())
attempt("stdin", lambda: open("/proc/1/fd/0", "wb").close())
attempt("stdout", lambda: open("/proc/1/fd/1", "rb").close())
attempt("stderr", lambda: open("/proc/1/fd/2", "wb").close())
attempt("fd_link", lambda: os.readlink("/proc/1/fd/1"))
attempt("environ", lambda: open("/proc/1/environ", "rb").read())
attempt("maps", lambda: open("/proc/1/maps", "rb").read())
attempt("root", lambda: os.listdir("/proc/1/root/"))
attempt("ptrace", ptrace)
print(json.dumps(out))
"""

# what a process inherits from the server, as a fresh shell of the next sample sees it
INHERITED = ("prlimit --pid $$ --raw --noheadings -o RESOURCE,SOFT,HARD | sort | tr -s ' '; "
             "taskset -p $$ | cut -d: -f2; nice; ionice -p $$; chrt -p $$ | cut -d: -f2; cat /proc/self/oom_score_adj; "
             "awk '{print $NF}' /proc/self/autogroup; cat /proc/self/timerslack_ns; "
             "head -c 200000 /dev/zero > /tmp/big && stat -c %s /tmp/big; rm -f /tmp/big")

# Each changes what the server's children inherit; the next sample must not inherit it.
SETTINGS_ATTACKS = {
    "file size limit": "prlimit --pid 1 --fsize=4096",
    "soft file size limit": "prlimit --pid 1 --fsize=4096:unlimited",
    "open files limit": "prlimit --pid 1 --nofile=16:16",
    "processes limit": "prlimit --pid 1 --nproc=5",
    "cpu affinity": "taskset -p 1 1",
    "priority": "renice -n 15 -p 1",
    "io priority": "ionice -c3 -p 1",
    "scheduling policy": "chrt -i -p 0 1",
    "oom score": "echo 1000 > /proc/1/oom_score_adj",
    "autogroup": "echo 19 > /proc/1/autogroup",
    "timer slack": "echo 50000000 > /proc/1/timerslack_ns",
}


def spec(docker_image: str, run_id: str, **kw) -> SandboxSpec:
    return SandboxSpec(image=docker_image, run_id=run_id, **kw)


async def next_sample_sees(pool: SandboxPool, attack: str) -> tuple[str, bool]:
    """Run `attack` as one sample, then ask as the next sample what it inherits; returns (what it
    saw, whether it got the same container back)."""
    sb = await pool.acquire()
    await sb.run(attack + " >/dev/null 2>&1; true", timeout=60)
    pool.release(sb)
    nxt = await pool.acquire()
    try:
        return (await nxt.run(INHERITED, timeout=60)).output, nxt is sb
    finally:
        pool.release(nxt)


def test_the_server_is_out_of_the_samples_reach(sandbox_factory, run_async):
    async def go():
        sb = await sandbox_factory(recyclable=True)
        await sb.write_file("/tmp/reach.py", REACH_PID1.encode())
        res = await sb.exec(["python3", "/tmp/reach.py"])
        assert res.exit_code == 0, res.stderr
        shell = await sb.run("python3 /tmp/reach.py")  # from the model's own shell too
        return json.loads(res.stdout), json.loads(shell.output), sb.server_info["guard"], sb.recyclable

    seen, from_shell, guard, recyclable = run_async(go())
    assert seen == from_shell
    assert {k: v for k, v in seen.items() if v != "denied"} == {}, seen
    assert guard == {"dumpable": 0, "gaps": []} and recyclable, guard


def test_the_servers_settings_never_reach_the_next_sample(docker_image, run_async):
    """Each attack as one sample; the next sample, on the same container or a fresh one, inherits
    exactly what a sample of a fresh container does."""
    async def go():
        seen, reused = {}, {}
        async with SandboxPool(spec(docker_image, "iso-settings"), size=1) as pool:
            seen["control"], reused["control"] = await next_sample_sees(pool, "true")
            for name, attack in SETTINGS_ATTACKS.items():
                seen[name], reused[name] = await next_sample_sees(pool, attack)
            return seen, reused, pool.stats

    seen, reused, stats = run_async(go())
    assert reused["control"], "an untouched container was not reused"
    assert "200000" in seen["control"], seen["control"]
    for name in SETTINGS_ATTACKS:
        assert seen[name] == seen["control"], (name, seen[name], seen["control"])
    # what the server cannot put back (a lowered hard limit, a higher nice value) discards the container
    assert not reused["file size limit"] and not reused["priority"], reused
    assert stats.recycle_failures >= 2
    assert containers_with_label("insandbox.run_id=iso-settings") == []


# Planted by one sample outside the container's own filesystem layer; each is looked for by the next.
PLANT_MOUNTS = r"""
set +e
echo planted > /dev/planted; mkdir -p /dev/planted-dir/deep; echo x > /dev/planted-dir/deep/f
ln -s /tmp /dev/planted-link
chmod 666 /dev/full; chown 1234:1234 /dev/tty
chmod 700 /dev/shm; chmod 700 /dev/mqueue
python3 -c "import os; os.setxattr('/dev/shm', 'user.planted', b'1')" 2>/dev/null
python3 -c "import os; os.setxattr('/dev/planted', 'user.planted', b'1')" 2>/dev/null
echo shm > /dev/shm/planted; chmod 600 /run/insandbox 2>/dev/null
python3 -c "
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
mqd = libc.mq_open(b'/planted', os.O_CREAT | os.O_RDWR, 0o600, None)
print('mq', mqd)
"
for path in /sys/fs/cgroup /sys/fs/cgroup/planted; do
  mkdir -p $path 2>/dev/null; echo x > $path/planted 2>/dev/null
done
setpriv --reuid=4321 --regid=4321 --clear-groups ipcmk -M 4096
setpriv --reuid=4321 --regid=4321 --clear-groups ipcmk -Q
setpriv --reuid=4321 --regid=4321 --clear-groups ipcmk -S 2
ipcmk -M 8192
"""
LOOK_MOUNTS = r"""
ls -A /dev | sort | tr '\n' ' '; echo
stat -c '%n %a %u %g' /dev/full /dev/tty /dev/shm /dev/mqueue /run/insandbox
ls -A /dev/shm /dev/mqueue /run/insandbox | tr '\n' ' '; echo
python3 -c "import os; print(sorted(os.listxattr('/dev/shm')))"
ls -A /sys/fs/cgroup | sort | tr '\n' ' '; echo
ipcs -a | grep -c '^0x'
"""


def test_in_memory_mounts_and_ipc_come_back_clean(docker_image, run_async):
    async def go():
        async with SandboxPool(spec(docker_image, "iso-mounts"), size=1) as pool:
            sb = await pool.acquire()
            fresh = (await sb.run(LOOK_MOUNTS)).output
            planted = await sb.run(PLANT_MOUNTS)
            dirty = (await sb.run(LOOK_MOUNTS)).output
            pool.release(sb)
            nxt = await pool.acquire()
            after = (await nxt.run(LOOK_MOUNTS)).output
            reused = nxt is sb
            pool.release(nxt)
            # a device node the server cannot make again: the container must go
            sb = await pool.acquire()
            await sb.run("rm -f /dev/zero")
            pool.release(sb)
            nxt = await pool.acquire()
            zero = (await nxt.run("test -c /dev/zero && echo present")).output
            pool.release(nxt)
            return fresh, planted.output, dirty, after, reused, nxt is not sb, zero

    fresh, planted, dirty, after, reused, replaced, zero = run_async(go())
    assert dirty != fresh and "planted" in dirty and dirty.splitlines()[-1] != "0", (planted, dirty)
    assert after == fresh, (after, fresh)
    assert reused  # everything above can be put back: the container stays in service
    assert replaced and zero.strip() == "present"
    assert containers_with_label("insandbox.run_id=iso-mounts") == []


# metadata the restore must put back on the image's folders and on "/" itself; ACLs are the
# system.posix_acl_* attributes (version 2: user::rwx, user:1234:rwx, group::r-x, mask::rwx, other::---)
ACL = ("b'\\x02\\x00\\x00\\x00\\x01\\x00\\x07\\x00\\xff\\xff\\xff\\xff\\x02\\x00\\x07\\x00\\xd2\\x04\\x00\\x00"
       "\\x04\\x00\\x05\\x00\\xff\\xff\\xff\\xff\\x10\\x00\\x07\\x00\\xff\\xff\\xff\\xff\\x20\\x00\\x00\\x00\\xff\\xff\\xff\\xff'")
PLANT_METADATA = f"""
set +e
python3 - <<'EOF'
import fcntl, os
os.setxattr('/usr/share', 'user.planted', b'1')
os.setxattr('/etc/issue', 'user.planted', b'1')
os.setxattr('/opt', 'system.posix_acl_access', {ACL})
os.setxattr('/srv', 'system.posix_acl_default', {ACL})
os.setxattr('/', 'user.planted', b'1')
for path in ('/usr/lib', '/var'):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    buf = bytearray(8)
    fcntl.ioctl(fd, 0x80086601, buf, True)
    flags = int.from_bytes(bytes(buf[:4]), 'little') | 0x40 | 0x80 | 0x8  # nodump, noatime, sync
    fcntl.ioctl(fd, 0x40086602, bytearray(flags.to_bytes(4, 'little') + bytes(4)))
    os.close(fd)
EOF
chmod 700 /; chown 1234:1234 /; chmod 1777 /usr/bin; chown 4321 /etc
"""


def test_image_metadata_comes_back(sandbox_factory, run_async):
    from tests.sandbox.test_recycle import differences, manifest

    async def go():
        sb = await sandbox_factory(recyclable=True)
        at_start = await manifest(sb)
        await sb.run(PLANT_METADATA)
        dirty = await manifest(sb)
        await sb.recycle()
        return at_start, dirty, await manifest(sb)

    at_start, dirty, after = run_async(go())
    planted = differences(dirty, at_start)
    for path in ("/", "/usr/share", "/opt", "/srv", "/usr/lib", "/var", "/usr/bin", "/etc"):
        assert any(line.startswith(f"differs: {path}: ") for line in planted), (path, planted)
    diff = differences(after, at_start)
    assert not diff, "\n".join(diff[:40])


WRITE_ENGINE_FILES = r"""
for f in /etc/hosts /etc/resolv.conf /etc/hostname; do
  echo x >> $f && echo wrote $f; chmod 600 $f && echo chmod $f; chown 1234 $f && echo chown $f
  python3 -c "import os; os.setxattr('$f', 'user.x', b'1')" 2>/dev/null && echo xattr $f
done
for fd in 1 2; do echo x > /proc/1/fd/$fd && echo wrote fd $fd; done
getent hosts sandbox; hostname
"""


def test_engine_files_and_the_servers_streams_cannot_be_written(sandbox_factory, run_async):
    async def go():
        sb = await sandbox_factory(recyclable=True)
        res = await sb.run(WRITE_ENGINE_FILES, timeout=60)
        return res.output

    out = run_async(go())
    assert "wrote" not in out and "chmod " not in out and "chown " not in out and "xattr " not in out, out
    assert out.splitlines()[-1] == "sandbox" and "sandbox" in out.splitlines()[-2], out


def test_capabilities_given_back_make_a_container_single_use(docker_image, run_async):
    async def go():
        async with SandboxPool(spec(docker_image, "iso-caps", limits=SandboxLimits(cap_add=["SYS_PTRACE"])),
                               size=1) as pool:
            sb = await pool.acquire()
            why = sb.info().get("not_recyclable", "")
            pool.release(sb)
            nxt = await pool.acquire()
            pool.release(nxt)
            return why, nxt is sb

    why, reused = run_async(go())
    assert "--cap-add" in why and not reused


def test_a_recycle_that_finds_problems_raises(sandbox_factory, run_async):
    async def go():
        sb = await sandbox_factory(recyclable=True)
        await sb.run("prlimit --pid 1 --nofile=64:64")
        with pytest.raises(SandboxError, match="nofile|NOFILE"):
            await sb.recycle()
        assert not sb.recyclable  # never offered again

    run_async(go())


# ---------------------------------------------------------------------- what a timed-out command leaves
def test_a_timed_out_command_cannot_hide_its_processes(sandbox_factory, run_async):
    """Whatever a command's processes do to their environment (re-export the marker with another
    command's number, clear it, double fork, start a new session), a timeout kills them all; an
    earlier command's background job lives on, and may still fork."""
    async def go():
        sb = await sandbox_factory()
        await sb.run("nohup sleep 2001 >/dev/null 2>&1 &")  # an earlier command's job
        await sb.run("nohup sh -c 'while true; do sleep 0.2; done' >/dev/null 2>&1 &")  # keeps forking
        res = await sb.run("(export INSANDBOX_CMD_ID=1; sleep 3001 &); (INSANDBOX_CMD_ID=2 setsid sleep 3002 &); "
                           "env -i sh -c '(sleep 3003 &) &'; (unset INSANDBOX_CMD_ID; nohup sleep 3004 &); "
                           "INSANDBOX_CMD_ID=1 sleep 3005", timeout=2)
        left = (await sb.run("ps -eo args= | grep -E '^sleep (2001|300[0-9])$' | sort")).output.split("\n")
        loop = (await sb.run("sleep 0.5; ps -eo args= | grep -c '^sh -c while'")).output.strip()
        return res, [x for x in left if x], loop

    res, left, loop = run_async(go())
    assert res.timed_out
    assert left == ["sleep 2001"], left
    assert loop == "1"


def test_a_sandbox_cannot_make_the_host_store_more_than_its_disk_limit(sandbox_factory, run_async):
    """With a 200 MB disk, every way to make the host keep bytes (the engine's /etc files, the
    server's stdout and stderr, which the engine would log, the container's own layer, its in-memory
    mounts) leaves the host's free space within the limit plus 100 MB."""
    import os
    import threading

    def free() -> int:
        st = os.statvfs("/var/lib/docker")
        return st.f_bavail * st.f_frsize

    lowest, stop = [free()], threading.Event()
    start = lowest[0]

    def watch():
        while not stop.is_set():
            lowest.append(free())
            stop.wait(0.1)

    fill = ("for f in /etc/hosts /etc/resolv.conf /etc/hostname /proc/1/fd/1 /proc/1/fd/2 /dev/stdout; do "
            "head -c 500000000 /dev/zero >> $f 2>/dev/null; done; "
            "for f in /testbed/fill /dev/fill /dev/shm/fill /run/insandbox/fill /sys/fs/cgroup/fill; do "
            "head -c 500000000 /dev/zero > $f 2>/dev/null; done; echo done")

    async def go():
        sb = await sandbox_factory(limits=SandboxLimits(disk="200m", memory="1g"))
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            res = await sb.run(fill, timeout=300)
        finally:
            stop.set()
            watcher.join()
        return res

    res = run_async(go())
    assert "done" in res.output + res.output_tail and "Read-only file system" in res.output
    dropped = start - min(lowest)
    assert dropped < (200 + 100) * 1024 * 1024, f"the host lost {dropped / 1e6:.0f} MB"
