"""Network modes: each mode a backend declares (Capabilities.network_modes) does what it says, and
one it does not declare is refused in one line when the sandbox is made. What a mode says, as far as
this machine's own services go: none reaches nothing; bridge (egress) and registries (package
registries through a proxy) never reach this machine's loopback; registries reaches none of this
machine's addresses at all; host reaches its loopback."""
from __future__ import annotations

import json

import pytest

from insandbox.sandbox import SetupError
from tests.sandbox.network_peer import PROBE
from tests.sandbox.test_network import host_addresses, tcp_server

MODES = ("none", "bridge", "registries", "host")


@pytest.mark.parametrize("mode", MODES)
def test_a_declared_mode_does_what_it_says_and_another_is_refused(backend, mode):
    if mode not in backend.caps.network_modes:
        with pytest.raises(SetupError) as e:
            backend.cls(backend.spec(limits={"network": mode}))
        assert str(e.value).startswith(f"the {backend.cls.backend} backend cannot --network {mode}")
        assert "\n" not in str(e.value)
        return
    with tcp_server("127.0.0.1") as lo, tcp_server("0.0.0.0") as anywhere:
        loopback = f"127.0.0.1:{lo}"
        others = [f"{ip}:{anywhere}" for ip in host_addresses()]

        async def body():
            sb = await backend.make(limits={"network": mode})
            await sb.write_file("/tmp/probe.py", PROBE.encode())
            res = await sb.exec(["python3", "/tmp/probe.py", loopback, *others], timeout=60)
            assert res.exit_code == 0, res.stderr
            return json.loads(res.stdout)

        seen = backend.run(body)
    if mode == "host":
        assert seen[loopback] == "ok", seen
    else:
        assert seen[loopback] != "ok", seen
    if mode in ("none", "registries"):
        assert all(v != "ok" for v in seen.values()), seen


def test_a_network_it_does_not_know_is_refused_in_one_line(backend):
    """A name outside the modes: refused when the sandbox is made, or (a backend with networks of its
    own, Docker's) by prepare, which looks the name up."""
    spec_args = {"limits": {"network": "no-such-network-here"}}
    if backend.caps.named_networks:
        with pytest.raises(SetupError) as e:
            backend.run(lambda: backend.cls.prepare(backend.spec(**spec_args)))
    else:
        with pytest.raises(SetupError) as e:
            backend.cls(backend.spec(**spec_args))
    assert "no-such-network-here" in str(e.value) and "\n" not in str(e.value)
