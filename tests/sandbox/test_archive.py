"""Pure functions: schemas, argument parsing, text tool calls, output clipping, prompts, archives."""
from __future__ import annotations

import io
import tarfile

from insandbox.sandbox.archive import extract_safely


def test_extract_safely_refuses_escapes(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("output/ok/a.txt", b"fine"), ("output/../../evil.txt", b"bad")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("output/link")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    buf.seek(0)
    written, skipped = extract_safely(buf, tmp_path / "dest")
    assert written == ["ok/a.txt"] and sorted(skipped) == ["../../evil.txt", "link"]
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path.parent / "evil.txt").exists()

