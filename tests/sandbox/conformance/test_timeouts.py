"""A command past its timeout is killed with everything it started, however it detached, and says so;
the shell, its state and the background jobs of earlier commands live on. Where this machine can see
the sandbox's processes (its pid namespace, from outside) it checks they are gone itself and says so
(`kill_checked`); where it cannot (gVisor's processes live in its own kernel), it says that too."""
from __future__ import annotations

from tests.sandbox.conformance.cases import COUNT_SLEEPS

LEFT = ("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -E 'sleep|hidden' "
        "| grep -v grep | sort")


def test_a_timed_out_command_is_killed_with_all_it_started(backend):
    async def body():
        sb = await backend.make()
        await sb.run("export KEEP=1; cd /usr")
        await sb.run("(env -i sleep 301 >/dev/null 2>&1 &)")  # an earlier job, its command ended normally
        r = await sb.run("(sleep 1000 & setsid sleep 1000 & wait); echo never", timeout=1.5)
        assert r.timed_out and r.exit_code is None and "never" not in r.output
        assert r.kill_checked is backend.backend.kill_checked and r.survivors == 0
        r = await sb.run("(env -i setsid python3 -c 'import time; time.sleep(1000)' &); (setsid env -i sleep 1000 &); "
                         "(nohup env -i bash -c 'exec -a hidden sleep 1000' >/dev/null 2>&1 &); sleep 1000",
                         timeout=1.5)
        assert r.timed_out and r.survivors == 0
        left = (await sb.run(LEFT)).output
        assert left.split("\n")[0].strip() == "sleep 301" and "1000" not in left, left
        assert "time.sleep" not in (await sb.run("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")).output
        assert (await sb.run("echo $KEEP $PWD")).output == "1 /usr\n"
        assert "sleeps=1" in (await sb.run(COUNT_SLEEPS)).output
    backend.run(body)
