"""When a sandbox ends, who ended it is decided from this machine: killed from outside (the engine's
kill, a signal to bwrap) is a SandboxError, the infrastructure's; ended by what ran inside it is
SandboxBrokenByItself, the model's doing, never put on the infrastructure. Either way the error is
clear and the sandbox can still be closed. What the model may try on the sandbox's first process
does not end it where the kernel protects a pid namespace's init; under gVisor it does, and that
end is the sandbox's own."""
from __future__ import annotations

import pytest

from insandbox.sandbox import SandboxBrokenByItself, SandboxError


def test_a_sandbox_killed_from_outside_gives_a_clear_error(backend):
    async def body():
        sb = await backend.make()
        assert sb.alive
        await backend.kill_from_outside(sb)
        with pytest.raises(SandboxError) as e:
            await sb.run("echo hi")
        assert not isinstance(e.value, SandboxBrokenByItself), e.value
        assert not sb.alive
        await sb.close()
        await sb.close()  # twice is fine
        return str(e.value)

    said = backend.run(body)
    assert "\n" not in said.strip() and ("outside" in said or "engine's API" in said), said


def test_a_sandbox_that_ended_itself_is_broken_by_itself(backend):
    """The CPU time of its first process (the in-sandbox server) limited to a second from inside, as root
    in the sandbox may, then a flood of output for the server to read: the kernel kills it, and nothing
    outside the sandbox did anything."""
    async def body():
        sb = await backend.make()
        with pytest.raises(SandboxBrokenByItself) as e:
            await sb.run("prlimit --pid 1 --cpu=1:1 && yes abcdefghijklmnopqrstuvwxyz | head -c 20000000000",
                         timeout=120)
        assert not sb.alive
        await sb.close()
        return str(e.value)

    said = backend.run(body)
    assert said and "\n" not in said.strip(), said


def test_killing_its_first_process_from_inside_never_reads_as_the_infrastructures_doing(backend):
    async def body():
        sb = await backend.make()
        try:
            r = await sb.run("kill -9 1; kill -TERM 1; kill -INT 1; pkill -9 -f python3; echo tried")
        except SandboxBrokenByItself:
            return "broken by itself"
        assert "tried" in r.output
        assert (await sb.run("echo alive")).output == "alive\n" and sb.alive
        return "alive"

    assert backend.run(body) == ("alive" if backend.backend.init_protected else "broken by itself")
