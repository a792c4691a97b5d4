"""What a sandbox keeps out: the host's environment (no variable of this process reaches it) and the
host's files (a file of this machine, readable by this process, is out of reach by any path, in its
commands and through its file operations)."""
from __future__ import annotations

import os
import uuid

import pytest

from insandbox.sandbox import SandboxFileError


def test_the_hosts_environment_and_files_stay_out(backend, monkeypatch, tmp_path):
    token = uuid.uuid4().hex
    monkeypatch.setenv("INSANDBOX_CONFORMANCE_SECRET", token)
    secret = tmp_path / "secret.txt"
    secret.write_text(token)
    os.chmod(tmp_path, 0o755)  # readable by anyone on this machine: only the sandbox's walls keep it out

    async def body():
        sb = await backend.make()
        inside = (await sb.run(f"env; cat /proc/1/environ | tr '\\0' '\\n'; cat {secret}; "
                               f"grep -rs {token} /tmp /root /home /testbed /etc 2>/dev/null | head -3; "
                               f"ln -s {secret} /testbed/to-host; cat /testbed/to-host", timeout=60)).output
        assert token not in inside and "INSANDBOX_CONFORMANCE_SECRET" not in inside, inside
        with pytest.raises(SandboxFileError):
            await sb.read_file(str(secret))
        with pytest.raises(SandboxFileError):
            await sb.read_file("/testbed/to-host")
        await sb.write_file(str(secret), b"from the sandbox\n")  # lands in the sandbox, not on this machine
        assert (await sb.run(f"cat {secret}")).output == "from the sandbox\n"
        assert (await sb.run("hostname")).output == "sandbox\n"
        env = (await sb.exec(["env"])).stdout
        assert token not in env and "INSANDBOX_CONFORMANCE_SECRET" not in env

    backend.run(body)
    assert secret.read_text() == token
