"""The loop: ask the model -> run its tool calls in the sandbox -> send back what happened.

    messages = system + task
    repeat:
        reply = model(messages, tools)              # one step
        run every tool call of the reply, in order  # their results go back, one per call
        (no tool call: a short nudge instead)
    until the episode is over

The env's `Episode` decides when it is over and why (submit, a limit, a stuck loop, a
failure); this file only asks and acts. A client may end it too, as context_length: a
token-level client (RL rollouts) whose reply ran into its response budget says so in the
reply (`ends_episode`: the step is kept, its calls are not run), and one whose next request
would not fit raises ContextFull instead of asking. The trajectory is filled in place and saved after
every step, so a run killed half way keeps everything up to its last step. The first
model request goes out while the sandbox is still starting: its reply is needed before
the sandbox is.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Optional, TypeVar

from ..core.episode import Episode, ExitReason, Limits
from ..core.errors import InternalSignal
from ..core.trajectory import FailedRequest, StepRecord, ToolCallRecord, Trajectory
from ..models.base import ContextFull, ModelClient, ModelError, ModelReply
from ..prompts import PromptConfig
from .env import SandboxEnv, StepResult, Task, no_calls_hint

StepHook = Callable[[StepRecord, Trajectory], None]
T = TypeVar("T")
NO_CALLS_HINT_AFTER = 3  # replies in a row without a tool call before the hint


class TimeUp(InternalSignal):
    """The episode's time limit passed while waiting."""


async def run_episode(env: SandboxEnv, model: ModelClient, task: Task, traj: Trajectory,
                      on_step: Optional[StepHook] = None, save: Optional[Callable[[], None]] = None) -> None:
    """Run one task to the end of its episode; sets traj's exit reason. The caller closes the env."""
    messages = env.prompt_messages(task)
    traj.messages, traj.tools = messages, env.tool_schemas
    await _loop(env, model, asyncio.ensure_future(env.reset(task)), traj, on_step, save)


async def continue_episode(env: SandboxEnv, model: ModelClient, traj: Trajectory,
                           on_step: Optional[StepHook] = None, save: Optional[Callable[[], None]] = None) -> None:
    """Go on with an episode already in progress (a fork's branch): env holds its sandbox and episode,
    traj the conversation so far (its messages, which grow in place) and the steps before."""
    started = asyncio.get_running_loop().create_future()
    started.set_result(None)
    await _loop(env, model, started, traj, on_step, save)


async def _loop(env: SandboxEnv, model: ModelClient, starting: asyncio.Future, traj: Trajectory,
                on_step: Optional[StepHook], save: Optional[Callable[[], None]]) -> None:
    messages = traj.messages
    episode = env.episode
    no_calls = 0  # replies in a row with no tool call, not even an unreadable one
    try:
        while not episode.done:
            reply = await _ask(model, messages, env.tool_schemas, episode, traj)
            if reply is None:
                break
            messages.append(reply.message)
            # the sandbox must be up before the first call (and, for a reply that ends the episode, for
            # whoever reads the sandbox after it)
            await bounded(asyncio.shield(starting), episode)
            if reply.ends_episode is not None:  # the client says so: its calls are not run
                episode.end(*reply.ends_episode)
                step = step_record(len(traj.steps) + 1, reply, None)
            else:
                result = await bounded(env.step(reply.tool_calls, reply.tool_call_errors,
                                                tokens=reply.usage.total_tokens,
                                                as_text=reply.tool_calls_from_text), episode)
                messages.extend(result.messages)
                step = step_record(len(traj.steps) + 1, reply, result)
                no_calls = 0 if reply.tool_calls or reply.tool_call_errors else no_calls + 1
                if no_calls == NO_CALLS_HINT_AFTER and not reply.tool_calls_from_text:
                    step.notes.append(no_calls_hint(no_calls, traj.config.get("tool_format", "native")))
            traj.add_step(step)
            if save:
                save()
            if on_step:
                on_step(step, traj)
    except TimeUp:
        episode.end_on_time()
    except asyncio.CancelledError as e:  # Ctrl-C or SIGTERM: record it, and let the caller clean up
        episode.end_on_error(e)
        raise
    except Exception as e:  # a broken sandbox (or a bug in insandbox): the episode ends, the record stays
        episode.end_on_error(e)
    finally:
        if not starting.done():
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)  # let it remove what it created
        elif not starting.cancelled() and starting.exception() is not None:
            episode.end_on_error(starting.exception())
        traj.end(episode.exit_reason, episode.exit_detail, episode.exit_cause)


async def _ask(model: ModelClient, messages: list[dict], tools: Optional[list[dict]], episode: Episode,
               traj: Trajectory) -> Optional[ModelReply]:
    """One model request; a failure is recorded in the trajectory (its time included) and ends the episode,
    as does a client's ContextFull (no request was made: nothing recorded)."""
    started = time.time()
    try:
        with episode.timing("model"):  # where a time limit's time went (core/episode.py)
            reply = await bounded(model.complete(messages, tools), episode)
    except ContextFull as e:  # the client found the conversation full before asking: no request failed
        episode.end(ExitReason.CONTEXT_LENGTH, str(e))
        return None
    except ModelError as e:
        reason = episode.end_on_error(e)
        traj.add_failed_request(FailedRequest(started_at=started, latency_s=e.latency_s or time.time() - started,
                                              error=str(e), exit_reason=reason))
        return None
    reply.started_at = started
    return reply


async def bounded(aw: Awaitable[T], episode: Episode) -> T:
    """Wait for `aw`, at most until the episode's time limit."""
    left = episode.time_left()
    if left is None:
        return await aw
    try:
        return await asyncio.wait_for(aw, left)
    except asyncio.TimeoutError:
        if episode.time_left() == 0.0:
            raise TimeUp() from None
        raise


async def run_llm_once(model: ModelClient, task: Task, prompts: PromptConfig, traj: Trajectory,
                       on_step: Optional[StepHook] = None) -> Optional[str]:
    """Plain mode: the same task as one completion without tools; returns the reply text."""
    messages = prompts.llm_messages(task.prompt, documents_text(task))
    traj.messages = messages
    episode = Episode(Limits(max_steps=1, stuck_after=None))
    reply = await _ask(model, messages, None, episode, traj)
    if reply is not None:
        messages.append(reply.message)
        step = step_record(1, reply, None)
        traj.add_step(step)
        if on_step:
            on_step(step, traj)
        episode.end(ExitReason.COMPLETED)
    traj.end(episode.exit_reason, episode.exit_detail, episode.exit_cause)
    return None if reply is None else reply.content or ""


def step_record(index: int, reply: ModelReply, result: Optional[StepResult]) -> StepRecord:
    u = reply.usage
    step = StepRecord(index=index, started_at=reply.started_at,
                      model_latency_s=reply.latency_s, prompt_tokens=u.prompt_tokens,
                      completion_tokens=u.completion_tokens, reasoning_tokens=u.reasoning_tokens,
                      cached_tokens=u.cached_tokens, cache_write_tokens=u.cache_write_tokens,
                      usage_reported=u.reported, finish_reason=reply.finish_reason,
                      time_to_first_token_s=reply.ttft_s, logprobs=reply.logprobs,
                      content=reply.content, reasoning=reply.reasoning,
                      tool_calls_from_text=reply.tool_calls_from_text, notes=reply.notes + reply.tool_call_errors)
    if result is not None:
        step.nudged, step.nudge_reason, step.tool_time_s = result.nudged, result.nudge_reason, result.tool_time_s
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
