"""Fork a recorded run at step k: "what if" with another model or prompt, N times.

    replay steps 1..k in a fresh sandbox (replayer.py)  ->  snapshot it  ->  N copies
    each copy: the recorded conversation up to step k (+ an extra user message, or another task
    text), continued by the model in its own run folder, as `insandbox run` would

A branch's trajectory holds the recorded steps 1..k (copied, as the model saw them) followed by
its own; `config.fork` says where it came from. Its cost and the model's settings are the
branch's; the sandbox settings are the recorded run's. The branch starts from the replayed state:
if the replay of steps 1..k differed from the recording, the result says where.
"""
from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..agent.env import SandboxEnv
from ..agent.loop import continue_episode
from ..config import RunConfig, refuse_redacted
from ..core.trajectory import StepRecord, Trajectory
from ..runs import layout
from ..runs.inputs import save_input_files
from ..runs.safe_files import check_new_folder, new_folder
from ..runs.session import RunFolder, RunResult, Session, new_run_id, settings
from ..sandbox import SandboxError
from .grants import check_model_server, check_spending
from .replayer import SANDBOX_DIRS, RecordedRun, Replayer, ReplayError, ReplayReport, load_recorded

# the model's settings: taken from the command line where given, else as recorded
MODEL_KEYS = ("provider", "model", "base_url", "api_key", "gguf", "temperature", "max_tokens", "extra_body",
              "tool_choice", "tool_format", "send_reasoning", "thinking_budget", "max_steps", "token_budget",
              "time_limit", "stuck_after", "max_retries", "request_timeout", "prices")


@dataclass
class ForkResult:
    replay: ReplayReport  # of steps 1..k
    branches: list[RunResult] = field(default_factory=list)
    timings: dict = field(default_factory=dict)  # replay_s, fork_s (snapshot + N copies ready), snapshot's own


def branch_settings(recorded: RecordedRun, overrides: dict[str, Any]) -> RunConfig:
    """The branches' settings: the recorded run's, with the model settings given laid over them: --base-url
    a server (its first model unless --model names one); without it the embedded model when the run had
    it, or this user's default server for a run that recorded none; a server the run folder names is
    never asked, nor is more spent than the defaults allow on the folder's word (grants.py)."""
    base = recorded.settings.model_dump()
    given = {k: v for k, v in overrides.items() if v is not None}
    check_model_server(base.get("base_url"), given)
    as_recorded = dict(base)
    if base.get("base_url") == "embedded" or "gguf" in given:  # a local model served by the fork itself
        base.update(model=None, base_url=None)
    elif "base_url" in given:  # another server: its own model unless one is named
        base.update(model=None)
    base.update(given)
    refuse_redacted(base, {"base_url": "--base-url", "extra_body": "--extra-body"})  # never send a "***"
    check_spending(as_recorded, given)
    return settings(None, base)


def prefix_messages(messages: list[dict], step: int) -> list[dict]:
    """The conversation as the model had it after step `step`'s results (before its next reply)."""
    out, replies = [], 0
    for m in messages:
        if m.get("role") == "assistant":
            if replies == step:
                break
            replies += 1
        out.append(copy.deepcopy(m))
    return out


def with_new_task(messages: list[dict], old: str, new: str) -> list[dict]:
    """The first user message with the task's text replaced (the rest of the instance prompt kept)."""
    for m in messages:
        if m.get("role") == "user":
            if not isinstance(m.get("content"), str) or not old or old not in m["content"]:
                raise ReplayError("--query-file: the recorded task text is not in the first user message, so it "
                                  "cannot be replaced; use --prompt-append")
            m["content"] = m["content"].replace(old, new)
            return messages
    raise ReplayError("--query-file: the recorded conversation has no user message")


OnStep = Callable[[int, StepRecord], None]


async def fork_run(run_dir: Path, step: int, n: int, overrides: Optional[dict[str, Any]] = None, *,
                   prompt_append: Optional[str] = None, query: Optional[str] = None,
                   output_dir: Optional[Path] = None, ignore: tuple[str, ...] = (), input_dir: Optional[Path] = None,
                   sandbox: Optional[dict[str, Any]] = None, on_granted: Optional[Callable[[list[str]], None]] = None,
                   on_step: Optional[OnStep] = None) -> ForkResult:
    """Replay steps 1..step of a run, fork its sandbox n ways and let each branch go on with the model.
    Branch i's folder: output_dir/branch-i (default RUN_DIR/forks/step-<k>/branch-i), new or empty.
    `sandbox`: the sandbox settings the caller gives (RunConfig fields), which alone may grant what the
    run folder asks beyond the defaults; `on_granted` hears which were. Everything the run folder could
    make wrong is refused (ReplayError, InputsMissing, UnsafeRunFolder) before anything is started."""
    run_dir = Path(run_dir)
    recorded = load_recorded(run_dir, given=sandbox)
    original = recorded.trajectory
    if not 0 <= step <= len(original.steps):
        raise ReplayError(f"--step {step}: the run has steps 1..{len(original.steps)} (0: before the first)")
    if n < 1:
        raise ReplayError("--n: at least one branch")
    cfg = branch_settings(recorded, overrides or {})
    messages = branch_messages(original, step, prompt_append, query)
    # the recorded prompts, never the prompt file the run folder names; the sandbox settings are the recorded
    # run's (the branches' differ only in the model's)
    session = Session(cfg, prompts=recorded.prompts)
    replayer = Replayer(recorded, ignore, input_dir, admission=session.admission)
    # the branch folders: made later without following links; a link or a used folder in the way stops here
    root, follow = (Path(output_dir), True) if output_dir else (run_dir, False)
    rels = [layout.fork_branch(step, i, into_run=not output_dir) for i in range(1, n + 1)]
    for rel in rels:
        check_new_folder(root, rel, follow_root=follow)
    if on_granted and recorded.granted:
        on_granted(recorded.granted)
    await session.open(sandbox=True)
    try:
        if output_dir:
            root.mkdir(parents=True, exist_ok=True)  # a folder the user named
        folders = [new_folder(root, rel, follow_root=follow) for rel in rels]
        result, envs = await _replay_and_fork(replayer, session, step, n)
        how = {"prompt_append": prompt_append, "query_replaced": query is not None}
        runs = [_branch(i, env, session, recorded, step, n, messages, folder, replayer.inputs.files, on_step, how)
                for i, (env, folder) in enumerate(zip(envs, folders, strict=True), 1)]
        result.branches = list(await asyncio.gather(*runs))
        return result
    finally:
        await replayer.close()
        await session.close()


def branch_messages(original: Trajectory, step: int, prompt_append: Optional[str], query: Optional[str]) -> list[dict]:
    """What the branches' model reads first: the recorded conversation up to step `step`, its task's text
    replaced by `query`, and `prompt_append` as one more user message."""
    messages = prefix_messages(original.messages, step)
    if query is not None:
        messages = with_new_task(messages, str(original.task.get("prompt") or ""), query)
    if prompt_append:
        messages.append({"role": "user", "content": prompt_append})
    return messages


async def _replay_and_fork(replayer: Replayer, session: Session, step: int, n: int) -> tuple[ForkResult,
                                                                                            list[SandboxEnv]]:
    """Steps 1..step replayed, then n environments forked from there (the replay's own sandbox removed)."""
    t0 = time.perf_counter()
    report = await replayer.replay(until=step)
    if report.stopped:
        raise SandboxError(report.stopped)
    if replayer.env.done:
        raise ReplayError(f"the run ended ({replayer.env.episode.exit_reason}) at step {step}: fork at an "
                          "earlier step")
    t1 = time.perf_counter()
    envs = await replayer.env.fork(n, session.env_config(new_run_id()))
    result = ForkResult(report, timings={"replay_s": t1 - t0, "fork_s": time.perf_counter() - t1})
    result.timings.update(envs[0].snapshot_timings)
    await replayer.close()  # the replay's own sandbox is not needed any more
    return result, envs


async def _branch(i: int, env: SandboxEnv, session: Session, recorded: RecordedRun, step: int, n: int,
                  messages: list[dict], run_dir: Path, inputs: dict[str, bytes], on_step: Optional[OnStep],
                  how: dict) -> RunResult:
    """One branch in its folder (`run_dir`, made new or empty by fork_run: nothing in it can be a link)."""
    original = recorded.trajectory
    try:  # new and empty: the copy-back then writes only where it made folders itself
        new_folder(run_dir, layout.FILES)
    except BaseException:
        await env.close()
        raise
    if inputs:  # the files the replay read from the run folder, so a branch replays on its own
        save_input_files(run_dir, inputs)
    fork = {"from": str(recorded.run_dir), "run_id": original.run_id, "step": step, "branch": i, "of": n, **how}
    task = {**copy.deepcopy(original.task), "sandbox_dirs": {k: getattr(recorded.prompts, k) for k in SANDBOX_DIRS}}
    traj = Trajectory(run_id=new_run_id(), mode="sandbox",
                      config={**session.cfg.public(), "model": session.client.name, "fork": fork},
                      task=task, tools=env.tool_schemas, messages=copy.deepcopy(messages))
    for s in original.steps[:step]:
        traj.add_step(s.model_copy(deep=True))
    traj.set_price(session.price)  # what the branch's own steps cost
    folder = RunFolder(run_dir, traj)
    folder.save()
    try:
        await continue_episode(env, session.client, traj, (lambda s, _t: on_step(i, s)) if on_step else None,
                               folder.save)
    finally:
        await folder.collect(env)
        folder.finish()
    return folder.result
