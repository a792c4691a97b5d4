"""The Docker sandbox: persistent shell, timeouts, big outputs, files, limits, failures."""
from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess

import pytest

from insandbox.core.errors import SandboxBrokenByItself
from insandbox.sandbox import CopyLimits, SandboxError, SandboxLimits
from insandbox.sandbox.docker import LABEL, LABEL_OWNER, LABEL_RUN, engine, owner_label

pytestmark = pytest.mark.docker

# ps without procps: count processes whose command line starts with `sleep`
COUNT_SLEEPS = ("n=0; for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); "
                "case \"$c\" in sleep*) n=$((n+1));; esac; done; echo sleeps=$n")

FIDELITY_CASES = {
    "empty.txt": b"",
    "dash_e.txt": b"-e",
    "tabs.py": b"def f(x):\n\tif x:\n\t\treturn 1\t# tab\n",
    "crlf.csv": b"a,b\r\n1,2\r\n",
    "nonl.txt": b"first\nlast line without newline",
    "utf8.txt": "héllo — ✓ 日本語 😀 e\u0301\n".encode(),
    "latin1.txt": "caf\xe9\n".encode("latin-1"),
    "shell.txt": b"$HOME `echo hi` $(echo hi) \\n '\"' !! \\\n",
    "big300k.txt": (b"0123456789abcdef" * 64 + b"\n") * 300,
    "big5m.bin": bytes(range(256)) * (5 * 1024 * 1024 // 256),
}


def test_shell_state_persists(sandbox_factory, run_async):
    async def body():
        sb = await sandbox_factory()
        await sb.run("cd /tmp && export FOO=bar && greet() { echo hello $1; } && x=5")
        r = await sb.run("pwd; echo $FOO; greet you; echo $x")
        assert r.output.splitlines() == ["/tmp", "bar", "hello you", "5"]
        assert r.exit_code == 0 and r.cwd == "/tmp"
        await sb.close()
    run_async(body())


def test_exit_codes_stderr_and_empty_stdin(sandbox_factory, run_async):
    async def body():
        sb = await sandbox_factory()
        r = await sb.run("echo out; echo err >&2; exit_with() { return $1; }; exit_with 7")
        assert r.exit_code == 7 and "out" in r.output and "err" in r.output
        r = await sb.run("cat; echo read-nothing")  # stdin is empty: cat must not hang
        assert r.output.strip() == "read-nothing" and not r.timed_out
        r = await sb.run("if then fi")  # a syntax error is an error, not a dead shell
        assert r.exit_code == 2 and "syntax error" in r.output
        assert (await sb.run("echo still here")).output == "still here\n"
        await sb.close()
    run_async(body())


def test_timeout_kills_the_whole_tree(sandbox_factory, run_async):
    async def body():
        sb = await sandbox_factory()
        await sb.run("sleep 300 &")  # a background job of an earlier command survives timeouts
        r = await sb.run("(sleep 1000 & sleep 1000 & wait); echo never", timeout=1.5)
        assert r.timed_out and "never" not in r.output
        assert 1.5 <= r.duration_s < 6
        left = await sb.run(COUNT_SLEEPS)
        assert "sleeps=1" in left.output  # only the earlier background sleep 300
        await sb.run("export KEEP=1; cd /usr")
        r = await sb.run("setsid sleep 1000 & disown; sleep 1000", timeout=1)  # escaped its group: still found
        assert r.timed_out
        assert "sleeps=1" in (await sb.run(COUNT_SLEEPS)).output
        assert (await sb.run("echo $KEEP $PWD")).output.strip() == "1 /usr"
        await sb.close()
    run_async(body())


def test_timeout_leaves_no_process_however_it_detached(sandbox_factory, run_async):
    """Double fork, new session, cleared environment, all at once: nothing the timed-out command
    started survives; a background job of an earlier command that did not time out does."""
    async def body():
        sb = await sandbox_factory()
        await sb.run("(env -i sleep 301 &)")  # an earlier detached job, its own command ended normally
        r = await sb.run("(env -i setsid python3 -c 'import time; time.sleep(1000)' &); "
                         "(setsid env -i sleep 1000 &); (nohup env -i bash -c 'exec -a hidden sleep 1000' "
                         ">/dev/null 2>&1 &); sleep 1000", timeout=1.5)
        assert r.timed_out
        r = await sb.run("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done "
                         "| grep -E 'sleep|hidden' | grep -v grep | sort")
        assert r.output.split("\n")[0].strip() == "sleep 301" and "1000" not in r.output, r.output
        await sb.close()
    run_async(body())


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


def test_model_cannot_kill_the_server(sandbox_factory, run_async):
    async def body():
        sb = await sandbox_factory()
        r = await sb.run("pkill -9 -f python3; kill -9 1; kill -TERM 1; echo tried")
        assert "tried" in r.output
        assert (await sb.run("echo alive")).output == "alive\n"
        await sb.close()
    run_async(body())


def test_twenty_megabyte_line_is_cut_in_the_middle(sandbox_factory, run_async):
    async def body():
        sb = await sandbox_factory(output_limit_chars=16000)
        r = await sb.run("python3 -c \"import sys; sys.stdout.write('%07d ' * 2500000 % tuple(range(2500000)) + "
                         "'\\n')\"")
        assert r.exit_code == 0 and r.total_chars == 20_000_001
        assert r.output.startswith("0000000 0000001") and r.output_tail.endswith("2499999 \n")
        assert len(r.output) + len(r.output_tail) <= 16000
        assert r.cut_chars == 20_000_001 - len(r.output) - len(r.output_tail)
        await sb.close()
    run_async(body())


@pytest.mark.parametrize("fast_max", [1 << 20, 0], ids=["server-for-small-files", "archive-api-only"])
def test_files_are_byte_exact(sandbox_factory, run_async, fast_max):
    """Small files go through the sandbox's server, big ones (and all, with 0) through the archive API."""
    async def body():
        sb = await sandbox_factory(fast_file_max_bytes=fast_max)
        for name, data in FIDELITY_CASES.items():
            await sb.write_file(f"/testbed/fid/{name}", data)
        sums = (await sb.run("cd /testbed/fid && sha256sum *")).output
        import hashlib
        for name, data in FIDELITY_CASES.items():
            assert f"{hashlib.sha256(data).hexdigest()}  {name}" in sums, name
            assert await sb.read_file(f"/testbed/fid/{name}") == data, name
        await sb.close()
    run_async(body())


def test_copy_in_and_out(sandbox_factory, run_async, tmp_path):
    src = tmp_path / "in"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_bytes(b"A\r\n")
    (src / "sub" / "b.bin").write_bytes(bytes(range(256)))

    async def body():
        sb = await sandbox_factory()
        await sb.copy_in(src, "/testbed/input")
        r = await sb.run("cd /testbed/input && find . -type f | sort && cat -A a.txt")
        assert "./a.txt\n./sub/b.bin\nA^M$" in r.output
        await sb.run("mkdir -p /testbed/output/x/y && printf 'deep' > /testbed/output/x/y/z.txt && "
                     "ln -s /etc/passwd /testbed/output/link && printf top > /testbed/output/top.txt")
        dest = tmp_path / "out"
        copied = await sb.copy_out("/testbed/output", dest)
        assert sorted(copied.files) == ["top.txt", "x/y/z.txt"]  # the symlink is not followed or copied
        assert (dest / "x/y/z.txt").read_bytes() == b"deep"
        assert not (dest / "link").exists() and [s.path for s in copied.skipped] == ["link"]
        empty = await sb.copy_out("/testbed/nothing-here", tmp_path / "none")
        assert empty.files == [] and empty.skipped == []
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


def test_dead_container_gives_a_clear_error(sandbox_factory, run_async):
    async def body():
        sb = await sandbox_factory()
        subprocess.run(["docker", "kill", sb.container_id], check=True, capture_output=True)
        with pytest.raises(SandboxError) as e:
            await sb.run("echo hi")
        # killed through the engine's API: the host's evidence makes it the infrastructure's, not the sandbox's
        assert "gone" in str(e.value) and "killed through the engine's API" in str(e.value)
        assert not isinstance(e.value, SandboxBrokenByItself)
        await sb.close()
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
