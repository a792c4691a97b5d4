"""Recycling a container between samples (docker.py `recycle`, recycle.py, server.py `reset`):
nothing of the previous sample survives, proved by comparing the whole filesystem with a fresh
container's, and by looking for its processes, shell state, in-memory files and IPC."""
from __future__ import annotations

import io
import json
import zipfile

import pytest

from insandbox.sandbox import SandboxError

# Every path of the container's root filesystem (other mounts skipped), "/" itself included, with its
# type, mode, owner, size, modification time, link target, a checksum of its content, its extended
# attributes (ACLs are some) and its chattr flags.
MANIFEST = r"""
import fcntl, json, os, stat, zlib
mounts = set()
for line in open('/proc/self/mountinfo'):
    mounts.add(line.split()[4])
out = {}
def extras(p, st):
    names = sorted(os.listxattr(p, follow_symlinks=False)) if not stat.S_ISLNK(st.st_mode) else []
    row = [[n, os.getxattr(p, n, follow_symlinks=False).hex()] for n in names]
    flags = None
    if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            buf = bytearray(8)
            fcntl.ioctl(fd, 0x80086601, buf, True)
            # chattr's flags a user may set, not those the file system keeps ("extents", "indexed")
            flags = int.from_bytes(bytes(buf[:4]), 'little') & 0x2083c0ff
        except OSError:
            pass
        os.close(fd)
    return [row, flags]
def entry(p):
    st = os.lstat(p)
    row = [stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns]
    if stat.S_ISLNK(st.st_mode):
        row.append(os.readlink(p))
    elif stat.S_ISREG(st.st_mode):
        crc = 0
        with open(p, 'rb') as f:
            for chunk in iter(lambda: f.read(1 << 20), b''):
                crc = zlib.crc32(chunk, crc)
        row += [st.st_size, crc]
    out[p] = row + extras(p, st)
    return st
def walk(d):
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        if p in mounts:
            continue
        if stat.S_ISDIR(entry(p).st_mode):
            walk(p)
st = entry('/')
out['/'][4] = None  # "/"'s own mtime moves with the mount points the engine makes in it
walk('/')
print(json.dumps(out))
"""

# What a messy sample does: new, changed, deleted and replaced files and folders everywhere, a package
# installed with pip, links out of the tree, processes that hide, shell state, /dev/shm, IPC, /etc/hosts.
MESS = r"""
set +e
echo new > /testbed/new.txt; mkdir -p /root/.cache/junk/deep && echo x > /root/.cache/junk/deep/f
echo tmp > /tmp/x; echo 'intruder:x:1234:1234::/tmp:/bin/sh' >> /etc/passwd
chmod 4777 /usr/bin/less; chown 1234:1234 /etc/debian_version; touch -d 2001-01-01 /etc/issue
rm -f /usr/bin/file; rm -rf /usr/share/doc/apt; mkdir /usr/share/doc/apt && echo replaced > /usr/share/doc/apt/only
rm -f /etc/os-release && ln -s /etc/passwd /etc/os-release; rmdir /mnt 2>/dev/null; touch /mnt
ln -s / /testbed/escape; ln -s /etc /testbed/etc-link; ln /usr/bin/python3 /testbed/hardlink
mkfifo /testbed/fifo; echo shm > /dev/shm/leak; ipcmk -M 4096 >/dev/null
echo '10.9.9.9 evil' >> /etc/hosts
pip install --no-index -q /tmp/isb_probe-1.0-py3-none-any.whl
nohup sleep 1000 >/dev/null 2>&1 & setsid sleep 1001 >/dev/null 2>&1 &
env -i sh -c '(sleep 1002 &) &'
export LEAK=1; leakfn() { echo leak; }; alias leakalias=true; cd /tmp
python3 -c 'import isb_probe; print(isb_probe.VALUE)'
"""


def probe_wheel() -> bytes:
    """A real wheel of a one-module package, so pip installs something offline."""
    files = {"isb_probe.py": "VALUE = 'installed'\n",
             "isb_probe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: isb-probe\nVersion: 1.0\n",
             "isb_probe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                               "Tag: py3-none-any\n"}
    record = "".join(f"{name},,\n" for name in files) + "isb_probe-1.0.dist-info/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, text in {**files, "isb_probe-1.0.dist-info/RECORD": record}.items():
            z.writestr(name, text)
    return buf.getvalue()


async def manifest(sb) -> dict:
    res = await sb.exec(["python3", "-c", MANIFEST], timeout=120)
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def differences(a: dict, b: dict) -> list[str]:
    out = [f"only in recycled: {p}" for p in sorted(set(a) - set(b))]
    out += [f"missing after recycling: {p}" for p in sorted(set(b) - set(a))]
    out += [f"differs: {p}: {a[p]} != {b[p]}" for p in sorted(set(a) & set(b)) if a[p] != b[p]]
    return out


def test_nothing_of_the_previous_sample_survives(sandbox_factory, run_async):
    async def go():
        sb = await sandbox_factory(recyclable=True)
        at_start = await manifest(sb)
        hosts = (await sb.read_file("/etc/hosts"))
        await sb.write_file("/tmp/isb_probe-1.0-py3-none-any.whl", probe_wheel())
        res = await sb.run(MESS, timeout=120)
        assert "installed" in res.output, res.output  # the mess really happened
        assert (await sb.run("ps -e | grep -c sleep")).output.strip() == "3"
        first = await sb.recycle()
        assert first["removed"] >= 5 and first["restored"] >= 5 and first["killed"] >= 3, first
        diff = differences(await manifest(sb), at_start)
        assert not diff, "\n".join(diff[:40])
        assert await sb.read_file("/etc/hosts") == hosts
        res = await sb.run('echo "${LEAK:-none}"; type leakfn leakalias 2>&1 | grep -c "not found"; pwd; '
                           "ls -A /dev/shm | wc -l; ipcs -m | grep -c 0x; ps -e -o comm= | sort | tr '\\n' ' '; echo; "
                           "python3 -c 'import isb_probe' 2>&1 | tail -1")
        lines = res.output.splitlines()
        assert lines[:5] == ["none", "2", "/testbed", "0", "0"], res.output
        assert set(lines[5].split()) <= {"python3", "bash", "ps", "sort", "tr"}, lines[5]  # server, shell, these
        assert "No module named 'isb_probe'" in lines[6]
        assert sb.info()["uses"] == 2 and sb.info()["recycled"]["removed"] == first["removed"]

        # a second sample touches a file restored by the first reset and leaves the others alone:
        # the untouched copies are kept, the touched one is restored again
        await sb.run("echo again >> /etc/passwd; echo more > /testbed/more")
        second = await sb.recycle()
        assert second["kept"] >= 3 and second["restored"] >= 1, second
        diff = differences(await manifest(sb), at_start)
        assert not diff, "\n".join(diff[:40])

    run_async(go())


def test_links_left_by_the_sample_never_lead_out_of_the_container(sandbox_factory, run_async, tmp_path):
    """The restore runs as root on the host: a folder the sample replaced by a link to / must be
    removed as a link, never followed into the host's files."""
    bait = tmp_path / "bait"
    bait.mkdir()
    (bait / "keep.txt").write_text("host file")

    async def go():
        sb = await sandbox_factory(recyclable=True)
        await sb.run(f"rm -rf /opt && ln -s {bait} /opt; mkdir -p /testbed/d && rm -rf /testbed/d && "
                     f"ln -s {bait} /testbed/d; ln -s {bait}/keep.txt /etc/issue.net")
        await sb.recycle()
        res = await sb.run("test -d /opt -a ! -L /opt && echo dir; test -L /etc/issue.net || echo file")
        assert res.output.split() == ["dir", "file"]

    run_async(go())
    assert (bait / "keep.txt").read_text() == "host file"


def test_a_sandbox_that_cannot_be_recycled_says_so(sandbox_factory, run_async):
    async def go():
        sb = await sandbox_factory()  # not asked to keep what recycling needs
        assert not sb.recyclable
        with pytest.raises(SandboxError, match="cannot be recycled"):
            await sb.recycle()

    run_async(go())
