"""Root filesystems for the bwrap backend (sandbox/rootfs.py): what unpacking keeps and refuses, where one
comes from (INSANDBOX_ROOTFS as a tar or a folder, the cache), and the one-line refusals. No engine."""
from __future__ import annotations

import io
import json
import os
import stat
import tarfile
from pathlib import Path

import pytest

from insandbox.sandbox import SetupError, rootfs


def _tar(members: list[tuple[tarfile.TarInfo, bytes]]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    buf.seek(0)
    return buf


def _m(name: str, kind=tarfile.REGTYPE, mode=0o644, link="", uid=0) -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    m.type, m.mode, m.linkname, m.uid, m.gid = kind, mode, link, uid, uid
    return m


def test_unpacking_keeps_a_root_filesystem_and_nothing_dangerous(tmp_path):
    meta = {"image": "insandbox:latest", "id": "sha256:abc", "env": {"LANG": "C.UTF-8"}, "workdir": "/testbed"}
    outside = tmp_path / "outside"
    outside.mkdir()
    src = _tar([
        (_m("usr", tarfile.DIRTYPE, 0o755), b""),
        (_m("usr/bin", tarfile.DIRTYPE, 0o555), b""),  # read-only folder: its owner gets to fill it
        (_m("usr/bin/su", mode=0o4755), b"setuid"),
        (_m("usr/bin/wall", mode=0o2755, uid=5), b"setgid"),
        (_m("bin", tarfile.SYMTYPE, link="usr/bin"), b""),
        (_m("etc", tarfile.DIRTYPE, 0o755), b""),
        (_m("etc/apt", tarfile.DIRTYPE, 0o755), b""),
        (_m("etc/alt", tarfile.SYMTYPE, link="/usr/bin/su"), b""),  # absolute: resolved inside the sandbox only
        (_m("tmp", tarfile.DIRTYPE, 0o1777), b""),
        (_m("dev/null", tarfile.CHRTYPE, 0o666), b""),
        (_m("run/fifo", tarfile.FIFOTYPE), b""),
        (_m("usr/bin/twin", tarfile.LNKTYPE, 0o4755, link="usr/bin/su"), b""),
        (_m("../escape.txt"), b"x"),
        (_m("out", tarfile.SYMTYPE, link=str(outside)), b""),
        (_m("out/through-the-link.txt"), b"x"),  # would land in `outside`
        (_m("etc/shadow-link", tarfile.LNKTYPE, link="../../etc/shadow"), b""),
        (_m(rootfs.META_MEMBER), json.dumps(meta).encode()),
    ])
    tree = tmp_path / "root"
    assert rootfs.unpack(src, tree) == meta
    su = (tree / "usr/bin/su").stat()
    assert stat.S_IMODE(su.st_mode) == 0o755 and stat.S_IMODE((tree / "usr/bin/wall").stat().st_mode) == 0o755
    assert su.st_uid == os.geteuid() == (tree / "usr/bin/wall").stat().st_uid  # every file is the unpacker's
    assert (tree / "usr/bin/twin").stat().st_ino == su.st_ino
    assert os.readlink(tree / "etc/alt") == "/usr/bin/su" and os.readlink(tree / "bin") == "usr/bin"
    assert stat.S_IMODE((tree / "tmp").stat().st_mode) == 0o1777
    assert stat.S_ISFIFO((tree / "run/fifo").lstat().st_mode) and not os.path.lexists(tree / "dev/null")
    assert list(outside.iterdir()) == [] and not (tmp_path / "escape.txt").exists()
    assert not os.path.lexists(tree / "etc/shadow-link") and not os.path.lexists(tree / rootfs.META_MEMBER)
    assert b'APT::Sandbox::User "root"' in (tree / rootfs.APT_CONF[0]).read_bytes()


def _plain_tree(path: Path) -> Path:
    (path / "usr/bin").mkdir(parents=True)
    (path / "etc").mkdir()
    (path / "usr/bin/tool").write_text("#!/bin/sh\n")
    return path


def test_insandbox_rootfs_names_a_folder_a_tar_or_nothing_usable(tmp_path, monkeypatch):
    monkeypatch.setenv(rootfs.CACHE_ENV, str(tmp_path / "cache"))
    said = []
    own = _plain_tree(tmp_path / "own")
    monkeypatch.setenv(rootfs.ROOTFS_ENV, str(own))
    assert rootfs.from_setting(said.append).tree == own  # this user's: in place, nothing copied
    foreign = _plain_tree(tmp_path / "foreign")
    for p in (foreign, *foreign.rglob("*")):
        os.chown(p, 65534, 65534, follow_symlinks=False)
    monkeypatch.setenv(rootfs.ROOTFS_ENV, str(foreign))
    copy = rootfs.from_setting(said.append)
    assert copy.tree.is_relative_to(tmp_path / "cache") and (copy.tree / "usr/bin/tool").stat().st_uid == os.geteuid()
    assert rootfs.from_setting(said.append).tree == copy.tree and len(said) == 1  # unpacked once, then found
    tar = tmp_path / "fs.tar"
    with tarfile.open(tar, "w") as t:
        t.add(own, arcname=".")
    monkeypatch.setenv(rootfs.ROOTFS_ENV, str(tar))
    from_tar = rootfs.from_setting(said.append)
    assert (from_tar.tree / "usr/bin/tool").read_text() == "#!/bin/sh\n" and from_tar.source == f"tar {tar}"
    for value, words in ((tmp_path / "missing", "no such folder or tar file"), (tmp_path / "cache", "not a root")):
        monkeypatch.setenv(rootfs.ROOTFS_ENV, str(value))
        with pytest.raises(SetupError, match=words) as e:
            rootfs.from_setting(said.append)
        assert "\n" not in str(e.value)
    monkeypatch.delenv(rootfs.ROOTFS_ENV)
    assert rootfs.from_setting(said.append) is None


def test_without_docker_and_without_a_setting_the_refusal_says_what_to_do(tmp_path, monkeypatch):
    from insandbox.sandbox.bwrap import find_rootfs

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.setenv(rootfs.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(rootfs.ROOTFS_ENV, raising=False)
    with pytest.raises(SetupError, match="no root filesystem for image 'insandbox:nowhere'.*INSANDBOX_ROOTFS"):
        find_rootfs("insandbox:nowhere")
