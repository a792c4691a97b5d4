"""What a bwrap sandbox's code cannot reach, tried from inside real sandboxes: the host user's kernel
keyrings (Kerberos and AFS tokens on a Slurm node), namespaces, mounts and the kernel's wider
interfaces (the seccomp filter), the host's network interfaces, paths and kernel internals (/sys,
/proc, mountinfo), and memory past the limit through shared mappings. And what the host checks from
outside: the filter on the sandbox's init (a sandbox without it is refused), its cgroup, its processes,
the kernel's OOM kills; normal work still runs."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from insandbox.sandbox import SandboxError, SandboxLimits, SetupError
from insandbox.sandbox.bwrap import LIVE, launch, seccomp
from tests.helpers import REPO
from tests.sandbox.conftest import NO_DOCKER, cache_of

# run inside: the errno of each syscall tried (0: it succeeded), given the machine's numbers
PROBE = r'''
import ctypes, json, os, sys
lib, L = ctypes.CDLL(None, use_errno=True), ctypes.c_long
n = json.loads(sys.argv[1])
def call(name, *args):
    r = lib.syscall(L(n[name]), *[L(a) if isinstance(a, int) else a for a in args])
    return 0 if r >= 0 else ctypes.get_errno()
def clone(flags):  # a raw clone shares this stack, as fork does: the child leaves at once
    me = os.getpid()
    r = lib.syscall(L(n["clone"]), L(flags), L(0), L(0), L(0), L(0))
    if os.getpid() != me:
        os._exit(0)
    if r > 0:
        os.waitpid(r, 0)
    return 0 if r >= 0 else ctypes.get_errno()
out = {
    "keyctl session": call("keyctl", 0, -3, 0), "keyctl user": call("keyctl", 0, -4, 0),
    "keyctl link user": call("keyctl", 8, -4, -3),
    "add_key": call("add_key", b"user", b"planted", b"x", 1, -3),
    "request_key": call("request_key", b"user", b"insandbox-test-secret", None, 0),
    "unshare user": call("unshare", 0x10000000), "unshare mount": call("unshare", 0x00020000),
    "unshare net": call("unshare", 0x40000000), "setns": call("setns", 0, 0),
    "clone newns": clone(0x00020000 | 17), "clone newuser": clone(0x10000000 | 17),
    "mount": call("mount", b"none", b"/mnt", b"tmpfs", 0, None), "umount2": call("umount2", b"/proc", 2),
    "fsopen": call("fsopen", b"tmpfs", 0), "open_tree": call("open_tree", -100, b"/", 1),
    "pivot_root": call("pivot_root", b"/", b"/"),
    "bpf": call("bpf", 0, None, 0), "perf_event_open": call("perf_event_open", None, 0, -1, -1, 0),
    "userfaultfd": call("userfaultfd", 0), "io_uring_setup": call("io_uring_setup", 1, None),
    "open_by_handle_at": call("open_by_handle_at", -100, None, 0),
    "personality no-aslr": call("personality", 0x0040000), "socket vsock": call("socket", 40, 1, 0),
    "clone3": call("clone3", None, 0),
    "personality query": call("personality", 0xFFFFFFFF), "socket inet": call("socket", 2, 1, 0),
    "fork": clone(17),
}
print(json.dumps(out))
'''
DENIED = ("keyctl session", "keyctl user", "keyctl link user", "add_key", "request_key", "unshare user",
          "unshare mount", "unshare net", "setns", "clone newns", "clone newuser", "mount", "umount2", "fsopen",
          "open_tree", "pivot_root", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "open_by_handle_at",
          "personality no-aslr", "socket vsock")
NUMBERS = json.dumps({name: seccomp.number(name) for name in seccomp.SYSCALLS})

# touches 768 MiB of one shared anonymous mapping, which RLIMIT_DATA does not count
SHARED_MAPPING = ("python3 -c \"import mmap; m = mmap.mmap(-1, 768 << 20, mmap.MAP_SHARED | mmap.MAP_ANONYMOUS); "
                  "[m.__setitem__(slice(i, i + 1), b'x') for i in range(0, 768 << 20, 4096)]; "
                  "print('all', 'touched')\"; echo rc=$?")

# a session keyring of this process's own holding a secret, as a Slurm job's holds its tokens; then a
# sandbox looks for it
KEYRING_HOLDER = r'''
import asyncio, ctypes, json, sys
from insandbox.sandbox import SandboxLimits, SandboxSpec, create_sandbox
from insandbox.sandbox.bwrap import seccomp
lib, L = ctypes.CDLL(None, use_errno=True), ctypes.c_long
assert lib.syscall(L(seccomp.number("keyctl")), L(1), ctypes.c_char_p(b"insandbox-test-host")) > 0
secret = lib.syscall(L(seccomp.number("add_key")), b"user", b"insandbox-test-secret", b"hunter2", L(7), L(-3))
assert secret > 0 and "insandbox-test-secret" in open("/proc/keys").read()
async def main():
    sb = create_sandbox(SandboxSpec(run_id="keys", limits=SandboxLimits(network="none")), "bwrap")
    await sb.start()
    await sb.write_file("/tmp/probe.py", sys.argv[1].encode())
    probe = (await sb.run("python3 /tmp/probe.py '" + sys.argv[2] + "'")).output
    shown = (await sb.run("cat /proc/keys /proc/key-users; echo rc=$?")).output
    await sb.close()
    print(json.dumps({"probe": json.loads(probe.strip().splitlines()[-1]), "shown": shown}))
asyncio.run(main())
'''


def _as_root(code: str, args: tuple, tmp_path: Path, rootfs_tar: Path, env: dict | None = None) -> dict:
    """`code` in a process of its own (as root, no Docker engine); its last line printed, as JSON."""
    full = {**os.environ, "DOCKER_HOST": NO_DOCKER, "INSANDBOX_ROOTFS": str(rootfs_tar),
            "INSANDBOX_ROOTFS_CACHE": str(cache_of(0)), "INSANDBOX_BWRAP_DIR": str(tmp_path / "sandboxes"),
            "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH")))),
            **(env or {})}
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=full, timeout=300)
    assert r.returncode == 0 and r.stdout.strip(), f"rc={r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def _keyrings_out_of_reach(got: dict) -> None:
    probe = got["probe"]
    for name in ("keyctl session", "keyctl user", "keyctl link user", "add_key", "request_key"):
        assert probe[name] == 1, (name, probe[name])  # EPERM: the secret's key id was the old answer
    assert got["shown"] == "rc=0\n"  # /proc/keys and /proc/key-users read empty: no _uid.N, no secret


def test_the_host_users_keyrings_are_out_of_reach_as_root(no_engine, tmp_path):
    _keyrings_out_of_reach(_as_root(KEYRING_HOLDER, (PROBE, NUMBERS), tmp_path, no_engine))


def test_the_host_users_keyrings_are_out_of_reach_as_an_unprivileged_user(as_user):
    _keyrings_out_of_reach(as_user.json(KEYRING_HOLDER, args=(PROBE, NUMBERS)))


def test_the_filter_denies_namespaces_mounts_and_the_kernels_wider_interfaces(bwrap_factory, run_async):
    async def body():
        sb = await bwrap_factory()
        await sb.write_file("/tmp/probe.py", PROBE.encode())
        got = json.loads((await sb.run(f"python3 /tmp/probe.py '{NUMBERS}'")).output.strip().splitlines()[-1])
        for name in DENIED:
            assert got[name] == 1, (name, got[name])  # EPERM
        assert got["clone3"] == 38  # ENOSYS: libc falls back to clone, whose flags the filter reads
        assert got["personality query"] == 0 and got["socket inet"] == 0 and got["fork"] == 0
        r = await sb.run("unshare -U true; echo rc=$?; unshare -n true; echo rc=$?; mount -t tmpfs x /mnt; echo rc=$?")
        assert r.output.count("rc=0") == 0 and r.output.count("rc=") == 3, r.output
        status = (await sb.run("grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status")).output
        assert "Seccomp:\t2" in status and "NoNewPrivs:\t1" in status
        await sb.close()
    run_async(body())


def test_the_hosts_interfaces_paths_and_kernel_internals_are_out_of_sight(bwrap_factory, run_async):
    host_ifaces = set(os.listdir("/sys/class/net")) - {"lo"}
    assert host_ifaces  # else there would be nothing to hide

    async def body():
        sb = await bwrap_factory()
        look = ("import json, os\n"
                "nets = sorted({n for d, subs, _ in os.walk('/sys/devices') if os.path.basename(d) == 'net' "
                "for n in subs})\n"
                f"masked = {{p: (os.listdir(p) if os.path.isdir(p) else open(p).read()) for p in "
                f"{list(launch.PROC_MASKED + launch.SYS_MASKED)!r} if os.path.exists(p)}}\n"
                "print(json.dumps({'class': sorted(os.listdir('/sys/class/net')), 'devices': nets, "
                "'masked': masked, 'mountinfo': open('/proc/self/mountinfo').read(), "
                "'cgroup': open('/proc/self/cgroup').read()}))\n")
        await sb.write_file("/tmp/look.py", look.encode())
        got = json.loads((await sb.run("python3 /tmp/look.py")).output.strip().splitlines()[-1])
        assert got["class"] == ["lo"] and got["devices"] == ["lo"], got  # not even below the NIC's PCI device
        assert "/proc/keys" in got["masked"] and "/proc/interrupts" in got["masked"]
        assert all(v in ("", []) for v in got["masked"].values()), got["masked"]
        for host_path in (str(sb.folder.path), str(sb.folder.path.parent), str(sb.rootfs.tree), str(Path.home())):
            assert host_path not in got["mountinfo"], host_path
        assert "lowerdir=lower,upperdir=upper,workdir=work" in got["mountinfo"]
        assert all(line.endswith(":/") for line in got["cgroup"].splitlines()), got["cgroup"]
        await sb.close()
        # --network host: the host's /sys as its network is, what is mounted below it masked
        sb = await bwrap_factory(limits=SandboxLimits(network="host"))
        r = await sb.run("ls /sys/class/net; ls /sys/fs/cgroup | wc -l; cat /proc/keys | wc -c")
        assert host_ifaces <= set(r.output.split()) and r.output.split()[-2:] == ["0", "0"], r.output
        await sb.close()
    run_async(body())


def test_memory_past_the_limit_through_shared_mappings_is_stopped_and_the_host_sees_it(bwrap_factory, run_async):
    """With a cgroup (root here): the sandbox in all, shared mappings included; the kernel's OOM kill
    is the host's count, and the server survives it."""
    async def body():
        sb = await bwrap_factory(limits=SandboxLimits(network="none", memory="64m"))
        assert "memory" in sb.info()["limits_held"]["memory"] and "cgroup" in sb.info()["limits_held"]["memory"]
        assert sb.group is not None and sb.group.memory_limit() == 64 << 20
        r = await sb.run(SHARED_MAPPING, timeout=60)
        assert "all touched" not in r.output and "rc=137" in r.output, r.output  # the OOM killer took it
        assert r.oom_kills >= 1 and sb.oom_kills_seen() >= 1
        assert (await sb.run("echo alive")).output == "alive\n"
        paths = sb.group.paths
        assert all(p.is_dir() for p in paths)
        await sb.close()
        assert not any(p.exists() for p in paths)  # the cgroup goes with the sandbox
    run_async(body())


def test_without_a_cgroup_rlimit_as_holds_shared_mappings(bwrap_factory, run_async, monkeypatch):
    monkeypatch.setenv("INSANDBOX_BWRAP_MEMORY", "rlimit")

    async def body():
        sb = await bwrap_factory(limits=SandboxLimits(network="none", memory="64m"))
        assert sb.group is None and sb.info()["limits_held"]["memory"].startswith("RLIMIT_AS")
        r = await sb.run(SHARED_MAPPING, timeout=60)
        assert "all touched" not in r.output and "Cannot allocate memory" in r.output, r.output
        assert sb.oom_kills_seen() is None and (await sb.run("echo alive")).output == "alive\n"
        await sb.close()
    run_async(body())
    monkeypatch.setenv("INSANDBOX_BWRAP_MEMORY", "sometimes")
    with pytest.raises(SetupError, match="INSANDBOX_BWRAP_MEMORY='sometimes'") as e:
        run_async(bwrap_factory(limits=SandboxLimits(network="none", memory="64m")))
    assert "\n" not in str(e.value)


def test_the_host_sees_the_sandboxs_processes_from_outside(bwrap_factory, run_async, monkeypatch):
    async def body():
        for mode in ("auto", "rlimit"):  # from its cgroup; from its pid namespace without one
            monkeypatch.setenv("INSANDBOX_BWRAP_MEMORY", mode)
            sb = await bwrap_factory()
            await sb.run("sleep 300 & sleep 301 &")
            for _ in range(100):  # until both subshells have become sleep
                tasks = sb.host_tasks()
                names = sorted(Path(f"/proc/{p}/comm").read_text().strip() for p in tasks)
                if names.count("sleep") == 2:
                    break
                await asyncio.sleep(0.05)
            assert sb.child_pid in tasks and names.count("sleep") == 2, (mode, names)
            assert sb.proc.pid not in tasks  # bwrap's own process is outside the sandbox
            await sb.close()
    run_async(body())


def test_cpus_are_held_by_the_cgroup(bwrap_factory, run_async):
    async def body():
        sb = await bwrap_factory(limits=SandboxLimits(network="none", cpus=0.5))
        assert sb.info()["limits_held"]["cpus"].startswith("cgroup")
        await sb.run("for i in 1 2 3 4; do timeout 60 sh -c 'while :; do :; done' & done")
        for _ in range(600):  # until the kernel has held it back once (however busy this machine is)
            stat = dict(line.split() for line in (sb.group.dirs["cpu"] / "cpu.stat").read_text().splitlines())
            if int(stat["nr_throttled"]) > 0:
                break
            await asyncio.sleep(0.1)
        assert int(stat["nr_throttled"]) > 0, stat
        await sb.close()
    run_async(body())


def test_the_host_refuses_a_sandbox_without_the_filter(bwrap_factory, run_async, monkeypatch, tmp_path):
    """bwrap started without --seccomp (as an older launcher would): the host reads the init's status
    from outside and refuses it; nothing is left behind."""
    real = launch.command

    def without_filter(*args, **kw):
        argv = real(*args, **kw)
        i = argv.index("--seccomp")
        return argv[:i] + argv[i + 2:]

    monkeypatch.setattr(launch, "command", without_filter)
    with pytest.raises(SandboxError, match="refused: the sandbox's init runs without a seccomp filter") as e:
        run_async(bwrap_factory())
    assert "\n" not in str(e.value) and not LIVE
    assert not list((tmp_path / "sandboxes").iterdir())


def test_normal_work_still_runs(bwrap_factory, run_async):
    async def body():
        sb = await bwrap_factory()
        r = await sb.run(
            "python3 -c 'from concurrent.futures import ThreadPoolExecutor as T; "
            "print(sum(T(16).map(lambda i: i * i, range(1000))))' && pip --version | cut -d' ' -f1 && "
            "printf '#include <stdio.h>\\n#include <pthread.h>\\n#include <unistd.h>\\n#include <sys/wait.h>\\n"
            "void *f(void *a) { return a; }\\nint main(void) { pthread_t t; pthread_create(&t, 0, f, 0); "
            "pthread_join(t, 0); if (fork() == 0) _exit(0); wait(0); puts(\"c ok\"); return 0; }\\n' > /tmp/t.c && "
            "gcc -pthread -o /tmp/t /tmp/t.c && /tmp/t && seq 1000 | sort -rn | head -1 && "
            "ps -o comm= -p 1 | cat", timeout=120)
        assert r.exit_code == 0 and r.output.split()[:4] == ["332833500", "pip", "c", "ok"], r.output
        assert r.output.split()[4:6] == ["1000", "python3"], r.output  # ps: the server is PID 1
        await sb.close()
    run_async(body())


def test_clean_removes_the_cgroup_of_a_sandbox_whose_owner_was_killed(no_engine, tmp_path):
    hold = """
import asyncio, json, os
from insandbox.sandbox import SandboxLimits, SandboxSpec, create_sandbox
async def main():
    sb = create_sandbox(SandboxSpec(run_id="held", limits=SandboxLimits(network="none")), "bwrap")
    await sb.start()
    print(json.dumps({"init": sb.child_pid, "folder": str(sb.folder.path), "cgroup": [str(p) for p in sb.group.paths]}),
          flush=True)
    await asyncio.sleep(1000)
asyncio.run(main())
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO / "src"), os.environ.get("PYTHONPATH"))))}
    p = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True, env=env)
    try:
        held = json.loads(p.stdout.readline())
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    deadline = time.time() + 20
    while time.time() < deadline and Path(f"/proc/{held['init']}").exists():
        time.sleep(0.1)
    assert held["cgroup"] and all(Path(c).is_dir() for c in held["cgroup"]) and Path(held["folder"]).exists()
    r = subprocess.run([sys.executable, "-m", "insandbox", "clean", "--backend", "bwrap"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 0 and f"removed {held['folder']}" in r.stdout, r.stdout + r.stderr
    assert not any(Path(c).exists() for c in held["cgroup"]) and not Path(held["folder"]).exists()


def test_a_sandbox_whose_server_the_oom_killer_took_broke_by_itself(bwrap_factory, run_async):
    """The model's code fills tmpfs (counted in the cgroup, in no process) and makes the server the OOM
    killer's first choice: the host's count says the sandbox killed itself, not the infrastructure."""
    from insandbox.core.errors import SandboxBrokenByItself

    async def body():
        sb = await bwrap_factory(limits=SandboxLimits(network="none", memory="64m"))
        await sb.run("head -c 50m /dev/zero > /dev/shm/fill; echo 1000 > /proc/1/oom_score_adj")
        with pytest.raises(SandboxBrokenByItself, match="killed for its memory limit"):
            await sb.run(SHARED_MAPPING.replace("768 << 20", "64 << 20"), timeout=60)
            await sb.run("echo alive")
        assert sb.oom_kills_seen() >= 1
        await sb.close()
    run_async(body())


def test_a_timed_out_command_is_finished_and_checked_from_the_host(bwrap_factory, run_async, monkeypatch):
    """As for Docker's sandboxes (tests/sandbox/test_hostview.py): the server here looks away after the
    timeout, and the host finds the command's processes in the sandbox's pid namespace and kills them; a
    background job of an earlier command lives on; the model is told "killed" because the host saw it."""
    from tests.sandbox.test_hostview import ZOMBIE_LEADER, blind_server

    blind_server(monkeypatch, "kill_command")

    async def go():
        sb = await bwrap_factory()
        await sb.run(ZOMBIE_LEADER + "sleep 1001 &")
        job = (await sb.run("pgrep -f 'sleep 1001'")).output.split()
        res = await sb.run("python3 /tmp/leader.py /tmp/mark & setsid sleep 1002 & sleep 100", timeout=2)
        assert res.timed_out and res.kill_checked and res.survivors == 0
        left = (await sb.run("sleep 0.3; pgrep -f 'sleep 100[12]|leader' | tr '\\n' ' '")).output.split()
        await sb.close()
        assert left == job

    run_async(go())
