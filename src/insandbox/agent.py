"""The loop: ask the model -> run its tool calls in the sandbox -> send back what happened.

    messages = system + task
    repeat:
        reply = model(messages, tools)              # one step
        run every tool call of the reply, in order  # one tool message per call id
        (no tool call: a short nudge instead)
    until submit, max steps, token budget, time limit or an error

The trajectory is filled in place and saved after every step, so a run killed half way
keeps everything up to its last step. The first model request goes out while the
sandbox is still starting: its reply is needed before the sandbox is.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

from . import trajectory as T
from .env import SandboxEnv, StepResult, Task
from .models.base import ContextLengthError, ModelClient, ModelError, ModelReply
from .prompts import PromptConfig
from .sandbox.base import SandboxError
from .trajectory import StepRecord, ToolCallRecord, Trajectory

StepHook = Callable[[StepRecord, Trajectory], None]


@dataclass
class Limits:
    """Limits the loop checks itself. The step limit is the env's (it tells the model the steps
    left); the wall-clock limit is applied around the loop by the runner."""

    token_budget: Optional[int] = None  # prompt + completion tokens over the whole run


async def run_sandbox_loop(env: SandboxEnv, model: ModelClient, task: Task, traj: Trajectory, limits: Limits,
                           on_step: Optional[StepHook] = None, save: Optional[Callable[[], None]] = None) -> None:
    """Run the multi-turn loop; sets traj.exit_reason. The caller closes the env."""
    messages = env.initial_messages(task)
    traj.messages, traj.tools = messages, env.tool_schemas
    starting = asyncio.ensure_future(env.start(task))
    try:
        while True:
            started = time.time()
            reply = await model.complete(messages, env.tool_schemas)
            messages.append(reply.message)
            await starting  # the sandbox must be up before the first tool call
            result = await env.step(reply.tool_calls, reply.tool_call_errors)
            messages.extend(result.messages)
            step = _step_record(len(traj.steps) + 1, started, reply, result)
            traj.add_step(step)
            if save:
                save()
            if on_step:
                on_step(step, traj)
            if result.submitted:
                return _finish(traj, T.SUBMITTED)
            if result.done:
                return _finish(traj, T.MAX_STEPS, f"no submit within {env.config.max_steps} steps")
            if limits.token_budget is not None and traj.totals.total_tokens >= limits.token_budget:
                return _finish(traj, T.TOKEN_BUDGET, f"{traj.totals.total_tokens} tokens used, budget "
                                                     f"{limits.token_budget}")
    except ContextLengthError as e:
        _finish(traj, T.CONTEXT_LENGTH, str(e))
    except ModelError as e:
        _finish(traj, T.MODEL_ERROR, str(e))
    except SandboxError as e:
        _finish(traj, T.SANDBOX_ERROR, str(e))
    finally:
        if not starting.done():
            starting.cancel()
        elif not starting.cancelled() and starting.exception() is not None and traj.exit_reason is None:
            _finish(traj, T.SANDBOX_ERROR, str(starting.exception()))


async def run_llm_once(model: ModelClient, task: Task, prompts: PromptConfig, traj: Trajectory,
                       on_step: Optional[StepHook] = None) -> Optional[str]:
    """Plain mode: the same task as one completion without tools; returns the reply text."""
    messages = prompts.llm_messages(task.prompt, documents_text(task))
    traj.messages = messages
    started = time.time()
    try:
        reply = await model.complete(messages, None)
    except ContextLengthError as e:
        _finish(traj, T.CONTEXT_LENGTH, str(e))
        return None
    except ModelError as e:
        _finish(traj, T.MODEL_ERROR, str(e))
        return None
    messages.append(reply.message)
    step = _step_record(1, started, reply, None)
    traj.add_step(step)
    if on_step:
        on_step(step, traj)
    _finish(traj, T.COMPLETED)
    return reply.content or ""


def _finish(traj: Trajectory, reason: str, detail: Optional[str] = None) -> None:
    traj.exit_reason, traj.exit_detail = reason, detail
    traj.submitted = reason == T.SUBMITTED


def _step_record(index: int, started: float, reply: ModelReply, result: Optional[StepResult]) -> StepRecord:
    u = reply.usage
    step = StepRecord(index=index, started_at=started, model_latency_s=reply.latency_s,
                      prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens,
                      reasoning_tokens=u.reasoning_tokens, cached_tokens=u.cached_tokens, usage_reported=u.reported,
                      finish_reason=reply.finish_reason, content=reply.content, reasoning=reply.reasoning,
                      tool_calls_from_text=reply.tool_calls_from_text,
                      notes=reply.notes + reply.tool_call_errors)
    if result is not None:
        step.nudged, step.tool_time_s = result.nudged, result.tool_time_s
        step.tool_calls = [ToolCallRecord(id=o.call.id, name=o.call.name, arguments=o.call.arguments,
                                          output=o.output.text, error=o.output.error, exit_code=o.output.exit_code,
                                          timed_out=o.output.timed_out,
                                          output_chars=o.output.total_chars or len(o.output.text),
                                          duration_s=o.duration_s)
                           for o in result.observations]
        step.observation_chars = sum(len(m.get("content") or "") for m in result.messages)
    return step


def documents_text(task: Task) -> str:
    """Plain mode has no sandbox: the text of the input files goes into the prompt instead."""
    files: dict[str, bytes] = {}
    if task.input_dir is not None:
        for p in sorted(task.input_dir.rglob("*")):
            if p.is_file():
                files[str(p.relative_to(task.input_dir))] = p.read_bytes()
    for name, data in task.input_files.items():
        files[name] = data.encode("utf-8") if isinstance(data, str) else data
    parts = []
    for name, data in files.items():
        if b"\0" in data[:8192]:
            parts.append(f'<document name="{name}">(binary file, {len(data)} bytes, not shown)</document>')
        else:
            parts.append(f'<document name="{name}">\n{data.decode("utf-8", "replace")}\n</document>')
    return "\n\n".join(parts)
