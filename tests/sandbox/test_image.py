"""The sandbox image has what the paper's tasks need, and pip works inside it."""
from __future__ import annotations

import pytest

from insandbox.sandbox.docker.image import host_ca_files


def test_image_contents(sandbox_factory, run_async):
    async def body():
        sb = await sandbox_factory()
        r = await sb.run("python3 -c 'import numpy, scipy, sympy, mpmath, matplotlib, pandas, IPython; print(\"ok\")' "
                         "&& pip --version && git --version && curl --version | head -1 && wget --version | head -1 "
                         "&& gcc --version | head -1 && make --version | head -1 && pwd")
        assert r.exit_code == 0, r.output
        assert r.output.startswith("ok\n") and r.output.rstrip().endswith("/testbed")
        await sb.close()
    run_async(body())


@pytest.mark.network
def test_host_ca_certificates_are_trusted_and_pip_installs(sandbox_factory, run_async):
    """On networks that intercept TLS the host's extra CAs must be in the image for pip to work."""
    async def body():
        sb = await sandbox_factory()
        for ca in host_ca_files():
            r = await sb.run(f"test -f /usr/local/share/ca-certificates/{ca.stem}.crt && echo present")
            assert "present" in r.output, ca
        r = await sb.run("pip download --no-deps --no-cache-dir -q -d /tmp/dl six && ls /tmp/dl", timeout=180)
        assert r.exit_code == 0 and "six-" in r.output, r.output
        await sb.close()
    run_async(body())
