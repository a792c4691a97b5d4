"""A sandbox backend that is no sandbox: a folder on this machine and `bash -c` in it. Used only by
tests/sandbox/test_seam.py to show what a backend needs: the Sandbox protocol, its Capabilities, and
one line registering it (sandbox.register_backend). It isolates nothing; never use it for a model.

Paths of the "sandbox" (/testbed/...) live under a temporary root folder; commands run with that
root's /testbed as their working folder, so the test's commands use relative paths.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import ClassVar, Optional

from insandbox.sandbox import (
    Capabilities,
    CommandResult,
    CopyLimits,
    CopyResult,
    ExecResult,
    FileStat,
    SandboxFileError,
    SandboxSpec,
)
from insandbox.sandbox.copyback import CopyBudget, Entry, host_path

STARTED: list[str] = []  # roots of every fake sandbox started, for the test to look at


class FakeSandbox:
    backend: ClassVar[str] = "fake"
    capabilities: ClassVar[Capabilities] = Capabilities(network_modes=("bridge", "none"))

    def __init__(self, spec: SandboxSpec):
        self.spec, self.uses, self.root, self._closed = spec, 0, None, False

    # the backend
    @classmethod
    async def prepare(cls, spec, on_status=lambda t: None, on_progress=lambda t: None) -> None:
        return None

    @classmethod
    def clean(cls, everything: bool = False, dry_run: bool = False) -> list:
        return []

    @classmethod
    async def reachable(cls, timeout: float = 10.0) -> bool:
        return True

    @classmethod
    async def remove_unremoved(cls) -> list[str]:
        return []

    @classmethod
    def kill_all_now(cls) -> None:
        return None

    # one sandbox
    async def start(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="insandbox-fake-"))
        (self.root / self.spec.workdir.lstrip("/")).mkdir(parents=True)
        self.uses = 1
        STARTED.append(str(self.root))

    def _host(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def info(self) -> dict:
        return {"backend": self.backend, "image": self.spec.image, "root": str(self.root)}

    @property
    def alive(self) -> bool:
        return self.root is not None and not self._closed

    @property
    def recyclable(self) -> bool:
        return False

    async def run(self, command: str, timeout: float = 120.0) -> CommandResult:
        proc = await asyncio.create_subprocess_exec("bash", "-c", command, cwd=self._host(self.spec.workdir),
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        text = out.decode(errors="replace")
        return CommandResult(output=text, exit_code=proc.returncode, total_chars=len(text), total_bytes=len(out),
                             cwd=self.spec.workdir)

    async def exec(self, argv: list[str], timeout: float = 60.0, stdin: str = "") -> ExecResult:
        if argv[:2] == ["mkdir", "-p"]:
            for folder in argv[2:]:
                if folder != "--":
                    self._host(folder).mkdir(parents=True, exist_ok=True)
            return ExecResult(exit_code=0, stdout="", stderr="")
        return ExecResult(exit_code=127, stdout="", stderr=f"the fake backend runs no {argv[0]}")

    async def stat(self, path: str) -> Optional[FileStat]:
        p = self._host(path)
        if not p.exists():
            return None
        st = p.stat()
        return FileStat(name=p.name, size=st.st_size, mode=st.st_mode & 0o7777, kind="directory" if p.is_dir() else
                        "file")

    async def resolve(self, path: str) -> tuple[str, Optional[FileStat]]:
        return path, await self.stat(path)

    async def read_file(self, path: str, max_bytes: Optional[int] = None) -> bytes:
        p = self._host(path)
        if not p.is_file():
            raise SandboxFileError(f"{path}: no such file")
        return p.read_bytes()

    async def write_file(self, path: str, data: bytes, mode: Optional[int] = None) -> None:
        p = self._host(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    async def remove_file(self, path: str) -> None:
        self._host(path).unlink(missing_ok=True)

    async def copy_in(self, host_path_: Path, container_dir: str) -> None:
        shutil.copytree(host_path_, self._host(container_dir), dirs_exist_ok=True)

    async def copy_in_files(self, files: dict[str, bytes], container_dir: str) -> None:
        for name, data in files.items():
            await self.write_file(f"{container_dir}/{name}", data)

    async def copy_out(self, container_dir: str, host_dir: Path, limits: Optional[CopyLimits] = None) -> CopyResult:
        budget, src, written = CopyBudget(limits), self._host(container_dir), []
        for p in sorted(src.rglob("*")) if src.is_dir() else []:
            rel = p.relative_to(src).as_posix()
            kind = "symlink" if p.is_symlink() else "directory" if p.is_dir() else "file"
            entry = Entry(rel, kind, p.lstat().st_size)
            if not budget.admit(entry):
                break
            decision = budget.decide(entry)
            target = host_path(Path(host_dir), rel)
            if decision.action == "copy" and target is not None:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(p.read_bytes())
                written.append(rel)
        return CopyResult(written, budget.skipped)

    async def close(self) -> None:
        self._closed = True
        if self.root is not None and os.path.isdir(self.root):
            shutil.rmtree(self.root, ignore_errors=True)
