"""A Harbor task or task set packed as an archive (.tar, .tar.gz, .tgz, .zip): unpacked once per content.

An archive may come from anyone, so it is unpacked by rules, not trusted: members are regular files
and folders only (no links, devices or FIFOs), named inside the archive (no absolute path, no `..`),
at most MAX_MEMBERS of them and MAX_BYTES in all, as their headers say and as written. The folder is
`~/.cache/insandbox/harbor/<digest of the archive>/` (INSANDBOX_CACHE_DIR moves it); an archive whose
folder is there is not unpacked again.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from ...core.errors import ConfigError

SUFFIXES = (".tar", ".tar.gz", ".tgz", ".zip")
MAX_MEMBERS = 100_000
MAX_BYTES = 4 << 30


def is_archive(path: Path) -> bool:
    return Path(path).is_file() and Path(path).name.lower().endswith(SUFFIXES)


def unpack(path: Path) -> Path:
    """The folder the archive unpacks to (its one top folder when it holds a single one)."""
    path = Path(path)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    root = Path(os.environ.get("INSANDBOX_CACHE_DIR", Path.home() / ".cache" / "insandbox")) / "harbor"
    target = root / digest.hexdigest()[:24]
    if not target.is_dir():
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=root))
        try:
            (_unzip if path.name.lower().endswith(".zip") else _untar)(path, work)
            os.replace(work, target)
        except FileExistsError:  # another process unpacked it meanwhile
            pass
        except OSError as e:
            raise ConfigError(f"{path}: cannot unpack: {e}") from None
        finally:
            shutil.rmtree(work, ignore_errors=True)
    entries = [p for p in target.iterdir() if not p.name.startswith(".")]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else target


def _checked_name(archive: Path, name: str) -> PurePosixPath:
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts or name.startswith("/") or "\\" in name:
        raise ConfigError(f"{archive}: member {name!r} would land outside the folder: refused")
    return rel


def _untar(archive: Path, into: Path) -> None:
    total = 0
    try:
        with tarfile.open(archive) as tar:
            members = []
            for n, m in enumerate(tar):
                if n >= MAX_MEMBERS:
                    raise ConfigError(f"{archive}: more than {MAX_MEMBERS} members: refused")
                _checked_name(archive, m.name)
                if not (m.isfile() or m.isdir()):
                    raise ConfigError(f"{archive}: member {m.name!r} is a link or a special file: refused")
                total += max(m.size, 0)
                if total > MAX_BYTES:
                    raise ConfigError(f"{archive}: more than {MAX_BYTES >> 30} GiB unpacked: refused")
                members.append(m)
            for m in members:
                dest = into / _checked_name(archive, m.name)
                if m.isdir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(m)
                with open(dest, "wb") as out:
                    shutil.copyfileobj(src, out)
                dest.chmod(0o755 if m.mode & 0o111 else 0o644)
    except (tarfile.TarError, EOFError) as e:
        raise ConfigError(f"{archive}: not a readable tar archive: {e}") from None


def _unzip(archive: Path, into: Path) -> None:
    try:
        with zipfile.ZipFile(archive) as z:
            infos = z.infolist()
            if len(infos) > MAX_MEMBERS:
                raise ConfigError(f"{archive}: more than {MAX_MEMBERS} members: refused")
            if sum(i.file_size for i in infos) > MAX_BYTES:
                raise ConfigError(f"{archive}: more than {MAX_BYTES >> 30} GiB unpacked: refused")
            for info in infos:
                rel = _checked_name(archive, info.filename)
                kind = (info.external_attr >> 16) & 0o170000
                if kind not in (0, 0o100000, 0o040000):
                    raise ConfigError(f"{archive}: member {info.filename!r} is a link or a special file: refused")
                dest = into / rel
                if info.is_dir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(dest, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
                if dest.stat().st_size != info.file_size:
                    raise ConfigError(f"{archive}: member {info.filename!r} is not the size its header says")
                dest.chmod(0o755 if (info.external_attr >> 16) & 0o111 else 0o644)
    except zipfile.BadZipFile as e:
        raise ConfigError(f"{archive}: not a readable zip archive: {e}") from None
