"""Files in and out of a sandbox, byte-exact whatever they hold and however big, looked up as the
sandbox's own processes see them: symbolic links followed inside it, never out of it; anything but
a regular file refused in one line; host folders copied in whole."""
from __future__ import annotations

import hashlib

import pytest

from insandbox.sandbox import SandboxFileError
from tests.sandbox.conformance.cases import FIDELITY_CASES


@pytest.mark.parametrize("fast_max", [1 << 20, 0], ids=["small-files-fast", "no-fast-way"])
def test_files_are_byte_exact_both_ways(backend, fast_max):
    """fast_file_max_bytes 0: a backend with a fast way for small files (the in-sandbox server) uses
    its other way for all; the shell sees the same bytes the host wrote, and reads back what it wrote."""
    async def body():
        sb = await backend.make(fast_file_max_bytes=fast_max)
        for name, data in FIDELITY_CASES.items():
            await sb.write_file(f"/testbed/fid/{name}", data)
        sums = (await sb.run("cd /testbed/fid && sha256sum *")).output
        for name, data in FIDELITY_CASES.items():
            assert f"{hashlib.sha256(data).hexdigest()}  {name}" in sums, name
            assert await sb.read_file(f"/testbed/fid/{name}") == data, name
        r = await sb.run("cd /testbed/fid && head -c 3000000 /dev/urandom > made.bin && printf 'a\\r\\nb' > made.txt "
                         "&& sha256sum made.bin")
        assert hashlib.sha256(await sb.read_file("/testbed/fid/made.bin")).hexdigest() == r.output.split()[0]
        assert await sb.read_file("/testbed/fid/made.txt") == b"a\r\nb"
        await sb.write_file("/testbed/fid/big5m.bin", b"shorter", mode=0o600)  # replaced, not appended to
        assert await sb.read_file("/testbed/fid/big5m.bin") == b"shorter"
        assert (await sb.run("stat -c %a /testbed/fid/big5m.bin")).output.strip() == "600"
    backend.run(body)


def test_paths_are_the_sandboxs_own(backend):
    async def body():
        sb = await backend.make()
        await sb.run("mkdir -p /testbed/d && echo target > /testbed/d/t.txt && cd /testbed && "
                     "ln -s /etc/hostname abs && ln -s ../../../../../etc/hostname up && ln -s d/t.txt rel && "
                     "ln -s loop1 loop2 && ln -s loop2 loop1 && ln -s /nowhere dangling && mkfifo fifo")
        # links are followed inside the sandbox: its own /etc/hostname, however many ../ lead "out"
        assert await sb.read_file("/testbed/abs") == b"sandbox\n" == await sb.read_file("/testbed/up")
        real, st = await sb.resolve("/testbed/rel")
        assert real == "/testbed/d/t.txt" and st.is_file and st.size == 7
        link = await sb.stat("/testbed/rel")
        assert link.kind == "symlink" and link.link_target == "d/t.txt"
        assert (await sb.stat("/testbed/d")).is_dir and await sb.stat("/testbed/missing") is None
        await sb.write_file("/testbed/rel", b"through the link\n")  # written where it points, as open() would
        assert (await sb.run("cat /testbed/d/t.txt")).output == "through the link\n"
        assert (await sb.stat("/testbed/rel")).kind == "symlink"
        for path, words in (("/testbed/missing", "no such file"), ("/testbed/fifo", "FIFO"),
                            ("/testbed/d", "directory"), ("/testbed/dangling", "no such file"),
                            ("/testbed/loop1", "symbolic links")):
            with pytest.raises(SandboxFileError, match=words) as e:
                await sb.read_file(path)
            assert "\n" not in str(e.value), path
        with pytest.raises(SandboxFileError, match="FIFO"):
            await sb.write_file("/testbed/fifo", b"x")
        with pytest.raises(SandboxFileError, match="limit"):
            await sb.read_file("/testbed/d/t.txt", max_bytes=4)
        await sb.remove_file("/testbed/d/t.txt")
        await sb.remove_file("/testbed/d/t.txt")  # already gone: fine
        assert await sb.stat("/testbed/d/t.txt") is None
        assert sb.alive  # none of that hurt the sandbox
    backend.run(body)


def test_copy_in_a_host_folder_and_files_from_memory(backend, tmp_path):
    src = tmp_path / "in"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "a.txt").write_bytes(b"A\r\n")
    (src / "sub" / "b.bin").write_bytes(bytes(range(256)) * 8192)  # 2 MiB
    (src / "sub" / "deeper" / "run.sh").write_bytes(b"#!/bin/sh\necho ran\n")
    (src / "sub" / "deeper" / "run.sh").chmod(0o755)

    async def body():
        sb = await backend.make()
        await sb.copy_in(src, "/testbed/input")
        await sb.copy_in(src / "a.txt", "/testbed/single")
        await sb.copy_in_files({"docs/one.txt": b"one\n", "two.bin": b"\x00\xff"}, "/testbed/documents")
        r = await sb.run("cd /testbed && find input single documents -type f | sort && cat -A input/a.txt && "
                         "sha256sum input/sub/b.bin && input/sub/deeper/run.sh")
        assert r.exit_code == 0, r.output
        assert r.output.startswith("documents/docs/one.txt\ndocuments/two.bin\ninput/a.txt\ninput/sub/b.bin\n"
                                   "input/sub/deeper/run.sh\nsingle/a.txt\nA^M$\n"), r.output
        assert hashlib.sha256((src / "sub" / "b.bin").read_bytes()).hexdigest() in r.output
        assert r.output.endswith("ran\n")
        assert await sb.read_file("/testbed/documents/two.bin") == b"\x00\xff"
    backend.run(body)
