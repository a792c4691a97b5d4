"""What a sandbox may do to its host: capabilities, no-new-privileges, the disk limit, runtimes."""
from __future__ import annotations

import pytest

from insandbox.sandbox import SandboxLimits, SandboxSpec
from insandbox.sandbox.base import SetupError
from insandbox.sandbox.docker import DockerSandbox, engine, limits

pytestmark = pytest.mark.docker


def test_capabilities_are_few_and_privileges_cannot_grow(sandbox_factory, run_async):
    async def body():
        sb = await sandbox_factory()
        hc = engine.api().inspect_container(sb.container_id)["HostConfig"]
        assert hc["CapDrop"] == ["ALL"] and set(hc["CapAdd"]) == set(limits.KEPT_CAPABILITIES)
        assert "no-new-privileges:true" in hc["SecurityOpt"]
        r = await sb.run("grep -E '^(NoNewPrivs|CapEff)' /proc/self/status")
        assert "NoNewPrivs:\t1" in r.output
        r = await sb.run("mknod /tmp/sda b 8 0; echo rc=$?")
        assert "rc=1" in r.output and "Operation not permitted" in r.output
        # a raw socket (ping, spoofing on the bridge) is refused; an ordinary one is not
        r = await sb.run("python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)\"")
        assert r.exit_code != 0 and "Operation not permitted" in r.output
        r = await sb.run("python3 -c \"import socket; socket.socket().bind(('127.0.0.1', 8080)); print('ok')\"")
        assert r.output.strip() == "ok"
        # what apt-get and pip do as root still works: chown, apt's switch to its own user, kill it
        r = await sb.run("touch /tmp/f && chown _apt:nogroup /tmp/f && chmod 4755 /tmp/f && "
                         "setpriv --reuid=_apt --regid=nogroup --clear-groups id -un && "
                         "(setpriv --reuid=_apt --regid=nogroup --clear-groups sleep 30 & sleep 0.2; "
                         "kill $! && echo killed)")
        assert r.exit_code == 0 and r.output.split() == ["_apt", "killed"], r.output
        await sb.close()
    run_async(body())


def test_a_capability_can_be_given_back(sandbox_factory, run_async):
    async def body():
        sb = await sandbox_factory(limits=SandboxLimits(cap_add=("NET_RAW",)))
        r = await sb.run("python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1); "
                         "print('raw ok')\"")
        assert r.output.strip() == "raw ok"
        await sb.close()
    run_async(body())


def test_writing_past_the_disk_limit_fails_inside_the_sandbox(sandbox_factory, run_async):
    async def body():
        mode, why = await engine.call(limits.disk_mode, engine.api())
        assert mode is not None, f"this engine cannot cap a sandbox's disk: {why}"
        sb = await sandbox_factory(limits=SandboxLimits(disk="300m"))
        assert sb.info()["disk_limit"] == "300m"
        r = await sb.run("dd if=/dev/zero of=/tmp/big bs=1M count=600 2>&1 | grep -E 'quota|space'; "
                         "du -sm /tmp/big | cut -f1", timeout=60)
        written = int(r.output.split()[-1])
        assert "Disk quota exceeded" in r.output or "No space left" in r.output, r.output
        assert 200 <= written <= 310, r.output  # stopped at the limit, with the files it already had
        assert (await sb.run("df -m / | tail -1")).output.split()[1] in {str(n) for n in range(250, 310)}
        # the sandbox lives on: freeing space makes writing work again
        r = await sb.run("rm /tmp/big && echo hello > /tmp/small && cat /tmp/small")
        assert r.output.strip() == "hello"
        await sb.close()
    run_async(body())


def test_an_unknown_runtime_is_a_setup_error_naming_the_known_ones(docker_image, run_async):
    spec = SandboxSpec(image=docker_image, limits=SandboxLimits(runtime="no-such-runtime"))
    with pytest.raises(SetupError, match="no such runtime.*runc"):
        run_async(DockerSandbox.prepare(spec))


def test_an_engine_that_refuses_size_falls_back_to_a_filesystem_of_the_sandbox_own(monkeypatch):
    """overlay2 on XFS without pquota looks able at first and refuses size= at the first container."""
    from insandbox.sandbox.docker import disk

    class Api:
        def info(self):
            return {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "xfs"]]}

    monkeypatch.setattr(limits, "_mode", {})
    assert limits.disk_mode(Api()) == (limits.ENGINE, "")
    monkeypatch.setattr(disk, "unavailable", lambda info: None)
    limits.engine_refused_size(Api(), "refused")
    assert limits.disk_mode(Api()) == (limits.OWN_FILESYSTEM, "")
    monkeypatch.setattr(disk, "unavailable", lambda info: "this process is not root")
    limits.engine_refused_size(Api(), "refused")
    assert limits.disk_mode(Api()) == (None, "refused, and this process is not root")


def test_a_quota_refusal_is_recognised():
    assert limits.is_quota_refusal("--storage-opt is supported only for overlay over xfs with 'pquota' mount option")
    assert not limits.is_quota_refusal("Failed to limit qgroup: disk quota exceeded")
    assert not limits.is_quota_refusal("Conflict. The container name is already in use")


def test_the_default_disk_limit_is_ten_gigabytes_and_leaves_nothing_behind(sandbox_factory, run_async):
    async def body():
        sb = await sandbox_factory()
        assert sb.info()["disk_limit"] == "10g"
        r = await sb.run("df -BG / | tail -1")
        assert r.output.split()[1] in ("9G", "10G"), r.output
        upper = engine.api().inspect_container(sb.container_id)["GraphDriver"]["Data"]["UpperDir"]
        layer = upper.rsplit("/", 1)[0]
        assert f" {layer} " in open("/proc/mounts").read()
        await sb.close()
        assert f" {layer} " not in open("/proc/mounts").read()  # the engine unmounted it with the container
    run_async(body())


@pytest.mark.network
def test_apt_get_and_pip_install_work_without_the_dropped_capabilities(sandbox_factory, run_async):
    async def body():
        sb = await sandbox_factory()
        r = await sb.run("apt-get update -qq 2>&1 | grep -c 'unsandboxed as root'; "
                         "apt-get install -y -qq --no-install-recommends tree >/dev/null 2>&1; echo apt=$?; "
                         "tree --version | head -c 9; echo", timeout=240)
        assert r.output.split()[:3] == ["0", "apt=0", "tree"], r.output  # and apt's own user did the downloads
        r = await sb.run("pip install -q --no-deps --no-cache-dir six 2>&1 | grep -v WARNING; "
                         "python3 -c 'import six; print(\"six\", six.__version__)'", timeout=240)
        assert "six " in r.output, r.output
        await sb.close()
    run_async(body())
