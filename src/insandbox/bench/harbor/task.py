"""Harbor task folders, read: `task.toml`, `instruction.md`, `environment/`, `tests/`, `solution/`.

A task folder holds `task.toml` and `instruction.md`; a dataset is a folder of task folders. Only what
insandbox acts on is read, in Harbor's spellings, older ones included (`memory = "4G"`, `storage`,
`allow_internet`); everything else in the file is left alone, as Harbor leaves what it does not
know. What cannot be honoured (a multi-step task, a GPU, a Windows image) is refused in one line.
"""
from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ...core.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10: the same parser, as a package
    import tomli as tomllib

TASK_FILE = "task.toml"
INSTRUCTION = "instruction.md"
NETWORK_MODES = {"public": "bridge", "no-network": "none", "allowlist": "registries"}  # Harbor's -> insandbox's
DEFAULT_VERIFIER_TIMEOUT_S = 600.0  # Harbor's default
_HOST = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")


@dataclass(frozen=True)
class Environment:
    """What the task's sandbox is: its image (built from `environment/` or named) and its limits."""

    dockerfile_dir: Optional[Path]  # environment/ with its Dockerfile; None: `image` is used as it is
    image: Optional[str]
    cpus: Optional[float]
    memory_mb: Optional[int]
    storage_mb: Optional[int]
    network: str  # insandbox's mode: bridge, none or registries
    allowed_hosts: tuple[str, ...]
    workdir: Optional[str]
    env: tuple[tuple[str, str], ...]
    build_timeout_s: float

    def key(self) -> tuple:
        """Tasks with equal keys can share a benchmark session (one image, the same limits and network)."""
        return (str(self.dockerfile_dir or ""), self.image, self.cpus, self.memory_mb, self.storage_mb, self.network,
                self.allowed_hosts, self.workdir, self.env)


@dataclass(frozen=True)
class Verifier:
    timeout_s: float
    env: tuple[tuple[str, str], ...]
    user: Optional[str]
    separate: bool  # environment_mode = "separate": a fresh sandbox made from the agent's final files


@dataclass(frozen=True)
class HarborTask:
    name: str
    path: Path
    instruction: str
    environment: Environment
    verifier: Verifier
    agent_timeout_s: Optional[float]
    solution_dir: Optional[Path]  # solution/ with solve.sh (the oracle agent)
    tests_dir: Path
    metadata: dict = field(default_factory=dict, compare=False)


def is_task_folder(path: Path) -> bool:
    return (path / TASK_FILE).is_file()


def is_harbor_path(path: Path) -> bool:
    """A task folder, or a folder with at least one task folder in it (a dataset)."""
    path = Path(path)
    return path.is_dir() and (is_task_folder(path) or any(is_task_folder(p) for p in _children(path)))


def load_tasks(path: Path) -> list[HarborTask]:
    """The task at `path`, or every task of the dataset folder `path` (its task folders, by name)."""
    path = Path(path)
    if is_task_folder(path):
        return [load_task(path)]
    folders = [p for p in _children(path) if is_task_folder(p)]
    if not folders:
        raise ConfigError(f"{path}: neither a Harbor task folder ({TASK_FILE} and {INSTRUCTION}) nor a folder of them")
    tasks = [load_task(p) for p in folders]
    names = [t.name for t in tasks]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"{path}: two tasks are named {dup[0]!r}; task names must be unique in a dataset")
    return tasks


def load_task(path: Path) -> HarborTask:
    path = Path(path).resolve()
    where = path / TASK_FILE
    try:
        config = tomllib.loads(where.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where}: not valid TOML: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{where}: cannot be read: {e}") from None
    instruction = path / INSTRUCTION
    if not instruction.is_file():
        raise ConfigError(f"{path}: no {INSTRUCTION} (a Harbor task needs one)")
    if config.get("steps"):
        raise ConfigError(f"{where}: multi-step tasks ([[steps]]) are not supported; run each step as a task")
    tests = path / "tests"
    if not (tests / "test.sh").is_file():
        raise ConfigError(f"{path}: no tests/test.sh (the verifier)")
    section = _sections(config, where)
    solution = path / "solution"
    meta = config.get("task") if isinstance(config.get("task"), dict) else {}
    name = str(meta.get("name") or path.name).replace("/", "__")
    return HarborTask(
        name=name, path=path, instruction=instruction.read_text(encoding="utf-8"),
        environment=_environment(section("environment"), path, where),
        verifier=_verifier(section("verifier"), where),
        agent_timeout_s=_seconds(section("agent").get("timeout_sec"), where, "agent.timeout_sec"),
        solution_dir=solution if (solution / "solve.sh").is_file() else None, tests_dir=tests,
        metadata=config.get("metadata") if isinstance(config.get("metadata"), dict) else {})


def _children(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []


def _sections(config: dict, where: Path):
    def section(name: str) -> dict:
        value = config.get(name, {})
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: [{name}] must be a table")
        return value
    return section


def _environment(env: dict, task: Path, where: Path) -> Environment:
    if str(env.get("os", "linux")).lower() != "linux":
        raise ConfigError(f"{where}: environment.os = {env['os']!r}: only Linux images run in insandbox")
    if env.get("gpus") or env.get("tpu"):
        raise ConfigError(f"{where}: the task asks for GPUs or TPUs, which insandbox's sandboxes do not give")
    folder = task / "environment"
    image = env.get("docker_image")
    dockerfile = folder if (folder / "Dockerfile").is_file() else None
    if image is None and dockerfile is None:
        raise ConfigError(f"{where}: no environment/Dockerfile and no environment.docker_image")
    memory = env.get("memory_mb")
    if memory is None and isinstance(env.get("memory"), str):
        memory = _size_mb(env["memory"], where, "environment.memory")
    storage = env.get("storage_mb")
    if storage is None and isinstance(env.get("storage"), str):
        storage = _size_mb(env["storage"], where, "environment.storage")
    mode = env.get("network_mode")
    if mode is None:
        mode = "no-network" if env.get("allow_internet") is False else "public"
    if mode not in NETWORK_MODES:
        raise ConfigError(f"{where}: environment.network_mode = {mode!r}: one of {', '.join(NETWORK_MODES)}")
    hosts = env.get("allowed_hosts") or []
    if not isinstance(hosts, list) or not all(isinstance(h, str) and _HOST.match(h.lower()) for h in hosts):
        raise ConfigError(f"{where}: environment.allowed_hosts must be a list of host names (no wildcards)")
    if mode == "allowlist" and not hosts:
        raise ConfigError(f"{where}: network_mode = \"allowlist\" needs allowed_hosts")
    cpus = env.get("cpus")
    return Environment(
        dockerfile_dir=dockerfile if image is None else None, image=str(image) if image else None,
        cpus=float(cpus) if isinstance(cpus, (int, float)) and cpus > 0 else None,
        memory_mb=_positive(memory, where, "environment.memory_mb"),
        storage_mb=_positive(storage, where, "environment.storage_mb"),
        network=NETWORK_MODES[mode],
        allowed_hosts=tuple(sorted(h.lower() for h in hosts)) if mode == "allowlist" else (),
        workdir=str(env["workdir"]) if env.get("workdir") else None,
        env=_pairs(env.get("env"), where, "environment.env"),
        build_timeout_s=_seconds(env.get("build_timeout_sec"), where, "environment.build_timeout_sec") or 600.0)


def _verifier(ver: dict, where: Path) -> Verifier:
    mode = ver.get("environment_mode") or "shared"
    if mode not in ("shared", "separate"):
        raise ConfigError(f"{where}: verifier.environment_mode = {mode!r}: \"shared\" or \"separate\"")
    user = ver.get("user")
    return Verifier(timeout_s=_seconds(ver.get("timeout_sec"), where, "verifier.timeout_sec")
                    or DEFAULT_VERIFIER_TIMEOUT_S,
                    env=_pairs(ver.get("env"), where, "verifier.env"), user=None if user is None else str(user),
                    separate=mode == "separate")


def _seconds(value: Any, where: Path, key: str) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where}: {key} must be a positive number of seconds, not {value!r}")
    return float(value)


def _positive(value: Any, where: Path, key: str) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{where}: {key} must be a positive whole number, not {value!r}")
    return value


def _size_mb(text: str, where: Path, key: str) -> int:
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMG])\s*", text.upper())
    if not m:
        raise ConfigError(f"{where}: {key} = {text!r}: a size like 512M or 4G")
    return max(1, int(float(m.group(1)) * {"K": 1 / 1024, "M": 1, "G": 1024}[m.group(2)]))


def _pairs(value: Any, where: Path, key: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {key} must be a table of names and values")
    return tuple(sorted((str(k), str(v)) for k, v in value.items()))
