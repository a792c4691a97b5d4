"""The Docker backend's own ways: the shell's streams and a shell that cannot be unwound, copy-back of
what Docker alone can make (devices, a 2 GB sparse file) through the server and the archive stream,
files while a command runs, labels and limits as the engine holds them, a killed host process, a
missing image. What every backend does is tests/sandbox/conformance/'s."""
from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess

import pytest

from insandbox.sandbox import CopyLimits, SandboxLimits
from insandbox.sandbox.docker import LABEL, LABEL_OWNER, LABEL_RUN, engine, owner_label

pytestmark = pytest.mark.docker


def test_a_shell_whose_output_was_closed_is_restored(sandbox_factory, run_async):
    async def body():
        sb = await sandbox_factory()
        await sb.run("cd /tmp && x=kept")
        r = await sb.run("echo before; exec 1>&- 2>&-; echo lost")
        assert r.output == "before\n" and r.streams_restored and not r.timed_out
        r = await sb.run("echo after $x $PWD; ls /nonexistent")
        assert r.output.startswith("after kept /tmp\n") and "No such file" in r.output and not r.streams_restored
        r = await sb.run("exec >/tmp/log 2>&1; echo into-the-log")  # a redirect is undone after the command
        assert r.streams_restored and (await sb.run("cat /tmp/log; echo shown")).output == "into-the-log\nshown\n"
        r = await sb.run("exec 62>&- 1>&-; echo gone")  # the saved copy is out of a command's reach
        assert r.streams_restored and not r.shell_restarted
        assert (await sb.run("echo $PWD")).output == "/tmp\n"
        await sb.close()
    run_async(body())


def test_timeout_aborts_the_rest_of_the_command_line(sandbox_factory, run_async):
    """Like Ctrl-C in a terminal: nothing after the stuck part runs, in loops and functions too."""
    async def body():
        sb = await sandbox_factory()
        await sb.run("cd /tmp && x=kept")
        for cmd in ("sleep 100; touch /tmp/ran1",
                    "f() { sleep 100; touch /tmp/ran2; }; f; touch /tmp/ran3",
                    "while true; do :; done; touch /tmp/ran4",
                    "g() { while :; do :; done; }; g; touch /tmp/ran5",
                    "sleep 100 | cat; touch /tmp/ran6"):
            r = await sb.run(cmd, timeout=0.5)
            assert r.timed_out and not r.shell_restarted, cmd
        r = await sb.run("ls /tmp/ran* 2>/dev/null | wc -l; echo $x $PWD")
        assert r.output.split() == ["0", "kept", "/tmp"]  # nothing ran after; even plain variables survive
        await sb.close()
    run_async(body())


def test_shell_is_restarted_with_its_state_when_it_cannot_be_unwound(sandbox_factory, run_async):
    async def body():
        sb = await sandbox_factory()
        await sb.run("cd /tmp && export FOO=kept")
        r = await sb.run("trap '' USR1; while true; do :; done", timeout=1)
        assert r.timed_out and r.shell_restarted
        r = await sb.run("echo $FOO $PWD")
        assert r.output.strip() == "kept /tmp"
        r = await sb.run("exit 3")
        assert r.exit_code == 3 and r.shell_exited
        assert (await sb.run("echo $FOO $PWD")).output.strip() == "kept /tmp"
        await sb.close()
    run_async(body())


@pytest.mark.parametrize("server_alive,sparse", [(True, "2G"), (False, "200M")],
                         ids=["through-server", "archive-stream"])
def test_copy_back_is_file_by_file_within_limits(sandbox_factory, run_async, tmp_path, server_alive, sparse):
    """Regression: a 2 GB sparse file beside normal.txt meant nothing came back (and rc 0); a hard
    link's second name was dropped. Now every file that fits comes back, each entry left behind
    is listed with its reason, and the same holds when the container has stopped (its server
    gone, the engine's archive stream is the only way)."""
    async def body():
        sb = await sandbox_factory(limits=SandboxLimits(cap_add=("MKNOD",)))  # for the device node below
        r = await sb.run(
            f"cd /testbed/output && printf 'normal\\n' > normal.txt && truncate -s {sparse} sparse.bin && "
            "mkdir -p d/e && head -c 3000000 /dev/urandom > d/e/big-but-fine.bin && "
            "ln d/e/big-but-fine.bin twin.bin && "
            "ln -s /etc/shadow shadow-link && ln -s missing dangling && mkfifo pipe && mknod null-dev c 1 3 && "
            "printf 'x' > $'odd\\xffname.txt' && printf 's' > small.txt && sha256sum d/e/big-but-fine.bin")
        assert r.exit_code == 0, r.output
        want_big = r.output.split()[0]
        if not server_alive:
            await sb.channel.close()  # as if the container's server had died
        dest = tmp_path / "out"
        limits = CopyLimits(max_file_bytes=64 * 1024 ** 2, max_total_bytes=None, max_entries=None)
        copied = await sb.copy_out("/testbed/output", dest, limits)
        assert sorted(copied.files) == sorted(["normal.txt", "d/e/big-but-fine.bin", "twin.bin", "odd\udcffname.txt",
                                               "small.txt"])
        assert (dest / "normal.txt").read_bytes() == b"normal\n"
        assert hashlib.sha256((dest / "twin.bin").read_bytes()).hexdigest() == want_big
        assert hashlib.sha256((dest / "d/e/big-but-fine.bin").read_bytes()).hexdigest() == want_big
        assert (dest / os.fsdecode(b"odd\xffname.txt")).read_bytes() == b"x"  # the name's bytes kept
        why = {s.path: s.reason for s in copied.skipped}
        assert set(why) == {"sparse.bin", "shadow-link", "dangling", "pipe", "null-dev"}
        size = "2.0 GiB" if sparse == "2G" else "200.0 MiB"
        assert "per-file limit" in why["sparse.bin"] and size in why["sparse.bin"]
        assert "symbolic link to '/etc/shadow'" in why["shadow-link"] and "FIFO" in why["pipe"]
        assert "character device" in why["null-dev"]
        for name in ("sparse.bin", "shadow-link", "dangling", "pipe", "null-dev"):
            assert not os.path.lexists(dest / name)

        # the total limit: files that would pass it are listed, not copied (the entry limit: test_copyback.py)
        few = await sb.copy_out("/testbed/output", tmp_path / "few", CopyLimits(max_file_bytes=None,
                                                                                max_total_bytes=10))
        assert sorted(few.files) == ["normal.txt", "odd\udcffname.txt", "small.txt"]  # 9 bytes
        assert any("total limit" in s.reason for s in few.skipped)
        await sb.close()
    run_async(body())


def test_labels_limits_and_cleanup(sandbox_factory, run_async):
    async def body():
        sb = await sandbox_factory(limits=SandboxLimits(memory="256m", cpus=0.5, pids=64, network="none"))
        info = engine.api().inspect_container(sb.container_id)
        labels = info["Config"]["Labels"]
        assert labels[LABEL] == "1" and labels[LABEL_RUN] == "test" and labels[LABEL_OWNER] == owner_label()
        hc = info["HostConfig"]
        assert hc["Memory"] == 256 * 1024 ** 2 and hc["NanoCpus"] == 5 * 10 ** 8 and hc["PidsLimit"] == 64
        r = await sb.run("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\"")
        assert r.exit_code != 0 and "Network is unreachable" in r.output
        r = await sb.run("for i in $(seq 100); do sleep 5 & done 2>&1 | tail -1; kill $(jobs -p) 2>/dev/null; "
                         "echo done")
        assert "Resource temporarily unavailable" in r.output or "fork" in r.output.lower()
        await sb.close()
        await sb.close()  # twice is fine
        assert subprocess.run(["docker", "inspect", sb.container_id], capture_output=True).returncode != 0
    run_async(body())


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "mid-command"])
def test_host_death_stops_the_container(busy):
    """A killed host process leaves no running sandbox: stdin EOF stops the server. Regression:
    SIGKILL while a command ran (`sleep 100`) left the container up until the command ended."""
    import sys
    import time

    code = ("import asyncio, os\n"
            "from insandbox.sandbox import SandboxSpec, create_sandbox\n"
            "async def main():\n"
            "    sb = create_sandbox(SandboxSpec(run_id='orphan-test'))\n"
            "    await sb.start()\n"
            "    print(sb.container_id, flush=True)\n"
            f"    if {busy}:\n"
            "        asyncio.ensure_future(sb.run('sleep 100; echo late', timeout=200))\n"
            "        await asyncio.sleep(1)\n"
            "        print('busy', flush=True)\n"
            "        await asyncio.sleep(1000)\n"
            "    os._exit(0)\n"
            "asyncio.run(main())\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    cid = proc.stdout.readline().strip()
    assert cid
    try:
        if busy:
            assert proc.stdout.readline().strip() == "busy"
            top = engine.api().top(cid)["Processes"]
            assert any("sleep 100" in " ".join(p) for p in top)  # the command is running
            proc.kill()  # SIGKILL: no clean-up of any kind
        proc.wait(30)
        deadline = time.time() + 30  # far less than the 100 s the command would have taken
        while time.time() < deadline:
            state = engine.api().inspect_container(cid)["State"]
            if not state["Running"]:
                break
            time.sleep(0.1)
        assert not state["Running"]
    finally:
        engine.api().remove_container(cid, force=True)


def test_missing_image_is_reported(run_async):
    from insandbox.sandbox import SandboxSpec, create_sandbox
    from insandbox.sandbox.docker import ImageNotFound

    async def body():
        sb = create_sandbox(SandboxSpec(image="insandbox-no-such-image:0", run_id="x"))
        with pytest.raises(ImageNotFound):
            await sb.start()
    run_async(body())


def test_files_stay_reachable_while_a_command_still_runs(sandbox_factory, run_async, tmp_path):
    """A caller gave up on a long command (time limit, Ctrl-C): the server is still busy with it,
    so reads and the copy-back go through the engine instead of waiting behind it."""
    async def body():
        sb = await sandbox_factory()
        await sb.write_file("/testbed/answer.txt", b"42\n")
        await sb.run("mkdir -p /testbed/output && echo r > /testbed/output/r.txt")
        task = asyncio.ensure_future(sb.run("sleep 60", timeout=120))
        await asyncio.sleep(0.3)
        task.cancel()
        t0 = asyncio.get_running_loop().time()
        assert await sb.read_file("/testbed/answer.txt") == b"42\n"
        assert (await sb.copy_out("/testbed/output", tmp_path / "out")).files == ["r.txt"]
        assert asyncio.get_running_loop().time() - t0 < 5
        await sb.close()
    run_async(body())
