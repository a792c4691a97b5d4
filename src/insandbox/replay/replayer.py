"""Replay: run a recorded trajectory's tool calls again, in order, in a fresh sandbox with the
recorded image, limits, environment variables and input files, through the same tools, and
compare each observation with the one the model got.

Nothing is normalised behind the user's back: an observation is `same` only when its text is
identical, after the `ignore` regular expressions (if any) have replaced what they match in both
texts with `<ignored>`. Timings, PIDs, dates and temporary names legitimately vary; the user says
which with `ignore`, and the report lists the patterns it used.

The replayed episode runs without the run's limits (steps, tokens, time, the stuck check): it
replays what was recorded, however the run ended. `Replayer.env` stays open after `replay()`
(a fork snapshots it); `close()` removes its sandbox.

A run folder is data: its files are read without following links (safe_files.py), no host path
it names is read (inputs come from its own inputs/ or from --input-dir), and its sandbox settings
give nothing beyond the defaults unless the command line does too (grants.py).
"""
from __future__ import annotations

import difflib
import json
import math
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from ..agent.env import SandboxEnv, Task
from ..config import ConfigError, RunConfig, validated
from ..core.errors import DataError
from ..core.trajectory import Trajectory
from ..prompts import PromptConfig, load_prompt_config
from ..runs import layout
from ..runs.inputs import FoundInputs, find_inputs
from ..runs.safe_files import SMALL_FILE_MAX_BYTES, TRAJECTORY_MAX_BYTES, read_file
from ..runs.trajectory_budget import load_trajectory
from ..sandbox.admission import Admission
from ..tools import ToolCall
from .grants import CHECKED, sandbox_settings

IGNORED = "<ignored>"
DIFF_MAX_LINES = 40
DIFF_MAX_CHARS = 4000
SANDBOX_DIRS = ("working_dir", "input_dir", "output_dir")


class ReplayError(DataError):
    """The run folder cannot be replayed (no trajectory, a plain-mode run, inputs gone); the message says why."""


@dataclass
class RecordedRun:
    run_dir: Path
    trajectory: Trajectory
    settings: RunConfig  # the run's sandbox and task settings, as recorded (or as the command line gave them)
    prompts: PromptConfig  # for the sandbox's folders (working, input, output)
    notes: list[str] = field(default_factory=list)
    granted: list[str] = field(default_factory=list)  # options the command line gave beyond the defaults


def load_recorded(run_dir: Path, image: Optional[str] = None, *, given: Optional[dict] = None) -> RecordedRun:
    """A run folder (`runs/<id>/`, or a benchmark sample `samples/<mode>/<id>/r<k>/`) ready to replay.
    The folder is data: its trajectory is read without following links, no host path it names is
    used, and its sandbox settings are checked against `given` (the command line's: grants.py).
    ReplayError or UnsafeRunFolder (both one line) when it cannot be replayed as it is."""
    run_dir = Path(run_dir)
    path = run_dir / layout.TRAJECTORY
    try:
        raw = read_file(run_dir, layout.TRAJECTORY, TRAJECTORY_MAX_BYTES)
    except FileNotFoundError:
        raise ReplayError(f"{run_dir}: no trajectory.json (give a run folder, or a benchmark sample's folder "
                          "samples/<mode>/<id>/r<k>)") from None
    except OSError as e:
        raise ReplayError(f"{path}: cannot be read ({e.strerror or e})") from None
    try:  # within a memory budget; anything that is not a trajectory is one line
        traj = load_trajectory(raw, path)
    except ValueError as e:
        raise ReplayError(str(e).splitlines()[0] if str(e) else f"{path}: not a trajectory") from None
    del raw
    if traj.mode != "sandbox":
        raise ReplayError(f"{run_dir}: a {traj.mode}-mode run made no tool calls; there is nothing to replay")
    given = {**(given or {}), **({"image": image} if image else {})}
    try:  # a bad recorded value (one the command line does not replace) is named as bad, not as asked for
        validated({k: v for k, v in traj.config.items() if k in CHECKED and k not in given})
        recorded, granted = sandbox_settings(traj.config, given)
        settings = validated(recorded)
        for key, value in settings.model_dump().items():  # NaN passes pydantic's float checks
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"--{key.replace('_', '-')}: {value} is not a number insandbox takes")
    except ConfigError as e:  # clipped: a recorded value can be any length, and the message may quote it
        raise ReplayError(f"{path}: the recorded settings do not load ({_clip(str(e))})") from None
    prompts, notes = _prompts(traj, run_dir)
    return RecordedRun(run_dir, traj, settings, prompts, notes, granted)


def _clip(text: str, most: int = 500) -> str:
    return text if len(text) <= most else text[:most] + f"... ({len(text):,} characters)"


def _sandbox_dir(value: object) -> Optional[str]:
    """A folder inside the sandbox as a run folder gives it: absolute, no "..", no control characters."""
    if not isinstance(value, str) or not value.startswith("/") or len(value) > 4096:
        return None
    if any(ord(c) < 32 or c == "\x7f" for c in value) or ".." in value.split("/"):
        return None
    return value


def _dirs_prompt(dirs: object, where: str) -> PromptConfig:
    if not isinstance(dirs, dict) or not all(_sandbox_dir(dirs.get(k)) for k in SANDBOX_DIRS):
        raise ReplayError(f"{where}: the sandbox folders ({', '.join(SANDBOX_DIRS)}) must be absolute paths "
                          "without '..'")
    return PromptConfig(system_prompt="", instance_prompt="", **{k: dirs[k] for k in SANDBOX_DIRS})


def _prompts(traj: Trajectory, run_dir: Path) -> tuple[PromptConfig, list[str]]:
    """The sandbox folders the run used: as it recorded them, else (runs made before they were recorded)
    the defaults, or a benchmark sample's task in its bench.json. A prompt-config file the run names on
    the host is never read: a run folder does not choose what insandbox reads."""
    if "sandbox_dirs" in traj.task:
        return _dirs_prompt(traj.task["sandbox_dirs"], "trajectory.json task.sandbox_dirs"), []
    source = str(traj.task.get("prompt_config") or "default")
    default = load_prompt_config()
    if source == "default":
        return default, []
    bench = layout.bench_of_sample(Path(os.path.abspath(run_dir)))  # the folders the user named
    if bench is not None:
        try:  # a link or a FIFO there is refused (UnsafeRunFolder), a missing or unreadable file is no help
            raw = read_file(bench, layout.BENCH, SMALL_FILE_MAX_BYTES, follow_root=True)
            task = json.loads(raw).get("task") or {}
        except (OSError, json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            task = None
        if isinstance(task, dict):
            return _dirs_prompt({k: task.get(k, getattr(default, k)) for k in SANDBOX_DIRS}, "bench.json task"), []
    return default, [f"the run's prompt config ({source}) is not read: the sandbox folders are taken to be "
                     f"{default.working_dir}, {default.input_dir} and {default.output_dir}"]


@dataclass
class CallComparison:
    step: int  # 1-based, as recorded
    call: int  # 1-based within the step
    tool: str
    arguments: str
    status: str  # "same" or "differs"
    recorded_exit_code: Optional[int] = None
    replayed_exit_code: Optional[int] = None
    diff: str = ""  # unified, of the texts after `ignore`, clipped


@dataclass
class ReplayReport:
    run_dir: str
    run_id: str
    steps_recorded: int
    steps_replayed: int = 0
    calls: int = 0
    identical: int = 0
    differing: int = 0
    first_divergence: Optional[dict] = None  # {"step", "call", "tool"} of the first call that differs
    ignore: list[str] = field(default_factory=list)
    inputs_match: Optional[bool] = None  # None: the run recorded no digests of its inputs
    notes: list[str] = field(default_factory=list)
    stopped: Optional[str] = None  # why the replay stopped before its last step (a broken sandbox)
    comparisons: list[CallComparison] = field(default_factory=list)

    def add(self, c: CallComparison) -> None:
        self.comparisons.append(c)
        self.calls += 1
        if c.status == "same":
            self.identical += 1
        else:
            self.differing += 1
            if self.first_divergence is None:
                self.first_divergence = {"step": c.step, "call": c.call, "tool": c.tool}

    def to_dict(self) -> dict:
        return asdict(self)


def compile_ignores(patterns: Iterable[str]) -> list[re.Pattern]:
    out = []
    for p in patterns:
        try:
            out.append(re.compile(p))
        except re.error as e:
            raise ReplayError(f"--ignore {p!r}: not a regular expression ({e})") from None
    return out


def masked(text: str, ignores: list[re.Pattern]) -> str:
    for rx in ignores:
        text = rx.sub(IGNORED, text)
    return text


def clipped_diff(recorded: str, replayed: str) -> str:
    lines = list(difflib.unified_diff(recorded.splitlines(), replayed.splitlines(), "recorded", "replayed",
                                      lineterm="", n=1))
    more = len(lines) - DIFF_MAX_LINES
    text = "\n".join(lines[:DIFF_MAX_LINES])
    if len(text) > DIFF_MAX_CHARS:
        text = text[:DIFF_MAX_CHARS] + " ..."
    if more > 0:
        text += f"\n... ({more} more diff lines)"
    if not lines:  # the texts differ only in line endings or a final newline
        text = f"recorded {recorded[-40:]!r}\nreplayed {replayed[-40:]!r}"
    return text


OnCall = Callable[[CallComparison], None]


class Replayer:
    """Replays one recorded run; `env` is the replay's live environment until close()."""

    def __init__(self, recorded: RecordedRun, ignore: Iterable[str] = (), input_dir: Optional[Path] = None,
                 admission: Optional[Admission] = None):
        """`admission`: the way the replay's sandbox starts through the admission gate (a session's; default:
        the process's gate)."""
        self.recorded = recorded
        self.ignores = compile_ignores(ignore)
        self.inputs: FoundInputs = find_inputs(recorded.trajectory.task, recorded.run_dir, input_dir)
        from ..runs.session import new_run_id

        # no limits: the replay runs what was recorded, however the run ended
        cfg = recorded.settings.env_config(recorded.prompts, new_run_id())
        cfg.max_steps, cfg.token_budget, cfg.time_limit, cfg.stuck_after = 1 << 30, None, None, None
        cfg.max_tool_calls_per_reply = 1 << 30  # every recorded call runs again, however many a reply made
        cfg.admission = admission
        self.env = SandboxEnv(cfg)

    async def replay(self, until: Optional[int] = None, on_call: Optional[OnCall] = None) -> ReplayReport:
        """Start the sandbox and run steps 1..until (all when None); a broken sandbox stops the
        replay (`report.stopped`), the report keeps what was compared."""
        from ..sandbox import SandboxError

        traj = self.recorded.trajectory
        report = ReplayReport(str(self.recorded.run_dir), traj.run_id, len(traj.steps),
                              ignore=[rx.pattern for rx in self.ignores], inputs_match=self.inputs.matches,
                              notes=self.recorded.notes + self.inputs.notes)
        steps = traj.steps if until is None else traj.steps[:until]
        task = Task(prompt=str(traj.task.get("prompt") or ""), id=str(traj.task.get("id") or ""),
                    input_dir=self.inputs.input_dir, input_files=dict(self.inputs.files))
        try:
            await self.env.reset(task)
            for step in steps:
                if self.env.done:
                    report.notes.append(f"the replayed episode ended ({self.env.episode.exit_reason}) before step "
                                        f"{step.index}")
                    break
                calls = [ToolCall(tc.id, tc.name, tc.arguments) for tc in step.tool_calls]
                result = await self.env.step(calls, tokens=step.prompt_tokens + step.completion_tokens,
                                             as_text=step.tool_calls_from_text)
                report.steps_replayed += 1
                for i, (rec, obs) in enumerate(zip(step.tool_calls, result.observations, strict=True), 1):
                    c = self._compare(step.index, i, rec, obs)
                    report.add(c)
                    if on_call:
                        on_call(c)
        except SandboxError as e:
            report.stopped = f"the sandbox failed: {e}"
        return report

    def _compare(self, step: int, i: int, rec, obs) -> CallComparison:
        before, after = masked(rec.output, self.ignores), masked(obs.output.text, self.ignores)
        same = before == after
        return CallComparison(step=step, call=i, tool=rec.name, arguments=rec.arguments,
                              status="same" if same else "differs", recorded_exit_code=rec.exit_code,
                              replayed_exit_code=obs.output.exit_code, diff="" if same else clipped_diff(before, after))

    async def close(self) -> None:
        await self.env.close()


async def replay_run(run_dir: Path, until: Optional[int] = None, ignore: Iterable[str] = (),
                     input_dir: Optional[Path] = None, image: Optional[str] = None,
                     on_call: Optional[OnCall] = None, sandbox: Optional[dict] = None) -> ReplayReport:
    """Replay a run folder and remove the sandbox: the whole check in one call. `sandbox`: settings the
    caller grants beyond the defaults (load_recorded's `given`)."""
    replayer = Replayer(load_recorded(run_dir, image, given=sandbox), ignore, input_dir)
    try:
        return await replayer.replay(until, on_call)
    finally:
        await replayer.close()
