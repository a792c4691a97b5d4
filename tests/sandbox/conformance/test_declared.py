"""What a backend declares: it is registered by name as a Sandbox subclass, and the optional
operations its Capabilities leave out (recycling, snapshots) refuse in one line, while those it
declares work."""
from __future__ import annotations

import pytest

from insandbox.sandbox import Sandbox, SandboxError, SetupError, backend_class


def test_it_is_a_registered_sandbox_subclass(backend):
    assert backend_class(backend.backend.name) is backend.cls and issubclass(backend.cls, Sandbox)
    assert not backend.cls.__abstractmethods__

    async def body():
        sb = await backend.make()
        info = sb.info()
        assert info["backend"] == backend.cls.backend and sb.uses == 1 and sb.alive
        await sb.close()
        await sb.close()
        assert not sb.alive
    backend.run(body)


def test_recycling_is_done_or_refused_in_one_line(backend):
    async def body():
        sb = await backend.make(recyclable=True)
        if not backend.caps.recycle:
            assert not sb.recyclable
            with pytest.raises(SandboxError, match=f"^the {backend.cls.backend} backend cannot recycle a sandbox$"):
                await sb.recycle()
            return
        if not sb.recyclable:  # declared, yet not this sandbox (gVisor): it says why, and a pool starts fresh ones
            assert sb.info()["not_recyclable"] and backend.id == "gvisor", sb.info().get("not_recyclable")
            return
        await sb.run("echo left > /testbed/left.txt && export LEFT=1 && cd /tmp")
        await sb.recycle()
        r = await sb.run("ls /testbed/left.txt 2>&1; echo ${LEFT:-unset} $PWD")
        assert "No such file" in r.output and r.output.endswith("unset /testbed\n") and sb.uses == 2
    backend.run(body)


def test_snapshots_are_taken_or_refused_in_one_line(backend):
    async def body():
        sb = await backend.make()
        await sb.run("echo kept > /testbed/file.txt; export KEPT=yes")
        if not backend.caps.snapshot:
            with pytest.raises(SetupError, match=f"^the {backend.cls.backend} backend cannot snapshot a sandbox$"):
                await sb.snapshot()
            return
        snap = await sb.snapshot()
        try:
            copy = await snap.start_copy()
            backend.made.append(copy)
            assert (await copy.run("cat /testbed/file.txt; echo $KEPT")).output.split() == ["kept", "yes"]
            await copy.close()
        finally:
            await snap.remove()
    backend.run(body)
