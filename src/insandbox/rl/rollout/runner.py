"""Rollouts: the policy samples tokens, the sandbox answers, the record keeps every id.

One rollout of one task row:

    prompt_ids = template(system, task) + assistant header
    repeat:
        sampled = generate(prompt_ids + response_ids)        # the policy's own sampler
        response_ids += sampled     (mask 1, logprobs kept)
        calls = the tool calls written in the sampled text   # same parser and messages as the loop
        results = env.step(calls)                            # a real sandbox
        response_ids += observation ids  (mask 0)           # tokenized once, never re-rendered
    until the episode ends, or the response reaches its token budget (truncated)
    reward = compute_reward(row, answer file, exit reason)

Many rollouts run at once, each in its own sandbox; `run_groups` makes GRPO groups of n samples
per task. A rollout never raises: a failing sampler, an engine fault or a rollout past its timeout
gives a record with the exit reason, the error, the reward config's error value and `masked` set
(trainers leave it out of the loss: it says nothing about the model). A sandbox its own processes
broke (exit_cause "sandbox") is the model's doing: it is trained on, with the broken-sandbox
penalty. A turn cut by the response budget ends the rollout as context_length, truncated, its
tool calls not run.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Optional

from pydantic import ConfigDict, Field

from ...agent.env import EnvConfig, SandboxEnv, Task
from ...agent.loop import step_record
from ...config import SandboxSettings
from ...core.episode import Episode, ExitReason
from ...core.trajectory import SkippedOutput, Trajectory
from ...models.base import ModelReply, Usage
from ...models.tool_text import parse_text_tool_calls
from ...prompts import PromptConfig, load_prompt_config
from ...sandbox import Skipped
from ...sandbox.pool import SandboxPool
from ..rewards import Outcome, RewardConfig, RewardResult, broken_sandbox_reward
from .chat import ChatFormat
from .types import GenerateFn, RolloutRecord, SamplingParams

log = logging.getLogger(__name__)

PROMPTS = Path(__file__).resolve().parents[1] / "prompts.yaml"
# besides the failures (model_error, internal_error, an engine's sandbox_error): endings that say
# nothing about the model, so trainers leave the rollout out of the loss
MASKED_EXITS = frozenset({ExitReason.TIME_LIMIT, ExitReason.INTERRUPTED})
RewardFn = Callable[[dict, Outcome, RewardConfig], Awaitable[RewardResult]]


class RolloutConfig(SandboxSettings):
    """How rollouts run (also the `rollout:` section of a training config). The sandbox's fields (image,
    limits, network, command timeout, output limit...) are those of a run, declared and checked once
    (config/sections.py)."""

    model_config = ConfigDict(extra="forbid", frozen=False)

    max_turns: int = Field(default=16, ge=1)  # model turns per episode
    max_response_tokens: int = Field(default=8192, ge=16)  # model and environment tokens after the prompt
    max_tokens_per_turn: int = Field(default=2048, ge=1)
    temperature: float = Field(default=1.0, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    timeout_s: float = Field(default=900.0, gt=0)  # a whole rollout; past it the rollout is masked
    stuck_after: Optional[int] = Field(default=None, ge=2)  # end early after identical steps (off, as in the paper)
    prompt_config: Optional[Path] = None  # default: rl/prompts.yaml (material in /testbed/documents)
    template_kwargs: dict[str, Any] = Field(default_factory=dict)  # e.g. {"enable_thinking": false}
    pool: bool = True  # rollouts of a run_groups() call share a pool of started sandboxes (sandbox/pool.py)
    recycle: bool = True  # ...recycled between rollouts where the engine allows (sandbox/recycle.py)

    def prompts(self) -> PromptConfig:
        return load_prompt_config(self.prompt_config or PROMPTS)

    def env_config(self, run_id: str = "") -> EnvConfig:
        return EnvConfig(prompts=self.prompts(), run_id=run_id, max_steps=self.max_turns,
                         stuck_after=self.stuck_after, **self.env_fields())


class Rollouts:
    def __init__(self, tokenizer: Any, config: Optional[RolloutConfig] = None,
                 reward: Optional[RewardConfig] = None, reward_fn: Optional[RewardFn] = None):
        self.config = config or RolloutConfig()
        self.reward_config = reward or RewardConfig()
        if reward_fn is None:
            from ..rewards import compute_reward as reward_fn
        self.reward_fn = reward_fn
        self.tokenizer = tokenizer
        self.env_template = self.config.env_config()
        self.chat = ChatFormat(tokenizer, SandboxEnv(self.env_template).tool_schemas, self.config.template_kwargs)
        self.pool: Optional[SandboxPool] = None  # while run_groups() runs (or a caller's own)

    # ------------------------------------------------------------------ many
    async def run_groups(self, rows: list[dict], generate: GenerateFn, n: int = 8, concurrency: int = 8,
                         on_record: Optional[Callable[[RolloutRecord], None]] = None) -> list[RolloutRecord]:
        """n rollouts of every row (a GRPO group each), at most `concurrency` sandboxes at once;
        records in row order, then sample order."""
        gate = asyncio.Semaphore(concurrency)
        own_pool = self.pool is None and self.config.pool
        if own_pool:
            self.pool = SandboxPool(self.env_template.sandbox_spec(), size=concurrency + min(concurrency, 8),
                                    recycle=self.config.recycle)
            self.pool.expect(len(rows) * n)

        async def one(i: int, row: dict, k: int) -> RolloutRecord:
            async with gate:
                record = await self.run(row, generate, group=i, sample=k)
            if on_record:
                on_record(record)
            return record

        try:
            return list(await asyncio.gather(*(one(i, row, k) for i, row in enumerate(rows) for k in range(n))))
        finally:
            if own_pool:
                pool, self.pool = self.pool, None
                await pool.close()

    # ------------------------------------------------------------------ one
    async def run(self, row: dict, generate: GenerateFn, group: int = 0, sample: int = 0) -> RolloutRecord:
        """One rollout of one task row; never raises."""
        task_id = str(row.get("id", ""))
        state = _State(RolloutRecord(id=f"{task_id}/g{group}/s{sample}", task_id=task_id, group=group, sample=sample,
                                     prompt_ids=[], response_ids=[], response_mask=[]))
        t0 = time.perf_counter()
        try:
            await asyncio.wait_for(self._episode(row, generate, state), self.config.timeout_s)
        except asyncio.TimeoutError:
            state.episode.end(ExitReason.TIME_LIMIT, f"the rollout took longer than {self.config.timeout_s:g}s")
        except Exception as e:  # the sampler or the sandbox failed: a record with the reason, never a crash
            state.episode.end_on_error(e)
            log.warning("rollout %s failed: %s", state.record.id, e)
        rec = state.record
        episode = state.episode
        rec.exit_reason = episode.exit_reason.value if episode.exit_reason else None
        rec.exit_detail = episode.exit_detail
        rec.exit_cause = episode.exit_cause
        t_reward = time.perf_counter()
        outcome = Outcome(answer=state.answer, exit_reason=rec.exit_reason or "", truncated=rec.truncated,
                          exit_cause=rec.exit_cause)
        if episode.exit_reason is ExitReason.SANDBOX_ERROR and episode.exit_cause == "sandbox":
            # the model broke its own sandbox: trained on, at the worst penalty (whatever reward_fn would say)
            reward = broken_sandbox_reward(row, self.reward_config)
        elif episode.exit_reason in MASKED_EXITS or episode.exit_reason is None or episode.exit_reason.is_failure:
            rec.masked = True  # nothing the model did: no reward to learn from
            reward = RewardResult(value=self.reward_config.error_value, error=rec.exit_detail,
                                  detail={"why": f"no reward, left out of the loss: {rec.exit_reason}: "
                                                 f"{rec.exit_detail}", "masked": True})
        else:
            try:
                reward = await self.reward_fn(row, outcome, self.reward_config)
            except Exception as e:  # a user's reward function failed: this rollout scores the error value
                reward = RewardResult(value=self.reward_config.error_value, error=f"{type(e).__name__}: {e}",
                                      detail={"why": "the reward function raised"})
        rec.reward, rec.reward_detail = reward.value, {"correct": reward.correct, **reward.detail}
        if reward.error:
            rec.reward_detail["error"] = reward.error
        rec.timings.update(generate_s=state.generate_s, env_s=state.env_s,
                           reward_s=time.perf_counter() - t_reward, wall_s=time.perf_counter() - t0)
        traj = state.trajectory
        traj.end(state.episode.exit_reason, state.episode.exit_detail, state.episode.exit_cause)
        traj.answer = state.answer
        traj.output_skipped = [SkippedOutput(path=s.path, reason=s.reason, size=s.size) for s in state.skipped]
        traj.totals.wall_time_s = rec.timings["wall_s"]
        rec.trajectory = traj.model_dump(mode="json")
        return rec

    async def _episode(self, row: dict, generate: GenerateFn, state: _State) -> None:
        cfg, chat, rec = self.config, self.chat, state.record
        env = SandboxEnv(self.config.env_config(run_id=rec.task_id[:24]))
        env.config.pool = self.pool
        task = Task(prompt=str(row["problem_statement"]), id=rec.task_id,
                    input_files=dict(row.get("input_files") or {}))
        messages = env.prompt_messages(task)
        traj = state.trajectory = Trajectory(run_id=rec.id, task={"id": rec.task_id, "prompt": task.prompt,
                                                                   "input_files": sorted(task.input_files)},
                                             config={"rollout": cfg.model_dump(mode="json"),
                                                     "reward": self.reward_config.model_dump(mode="json")},
                                             tools=env.tool_schemas)
        traj.messages = messages  # the same list, kept up to date (the constructor would copy it)
        rec.prompt_ids = chat.prompt_ids(messages)
        starting = asyncio.ensure_future(env.reset(task))
        state.episode = env.episode
        try:
            while not env.done:
                left = cfg.max_response_tokens - len(rec.response_ids)
                params = SamplingParams(max_tokens=min(cfg.max_tokens_per_turn, left), temperature=cfg.temperature,
                                        top_p=cfg.top_p, stop_token_ids=list(chat.stop_token_ids))
                context = rec.prompt_ids + rec.response_ids
                started, t_gen = time.time(), time.perf_counter()
                sampled = await generate(context, params)
                latency = time.perf_counter() - t_gen
                state.generate_s += latency
                ids = list(sampled.token_ids)[:left]
                rec.response_ids += ids
                rec.response_mask += [1] * len(ids)
                logprobs = list(sampled.logprobs)[:len(ids)] if sampled.logprobs is not None else [None] * len(ids)
                state.logprobs += logprobs
                state.have_logprobs = state.have_logprobs or sampled.logprobs is not None
                stopped = bool(ids) and ids[-1] in chat.stop_token_ids
                assistant = {"role": "assistant", "content": chat.assistant_text(ids)}
                messages.append(assistant)
                calls, rest, errors = parse_text_tool_calls(assistant["content"])
                rec.num_turns += 1
                t_env = time.perf_counter()
                if not state.started:  # the sandbox started while the first turn was sampled
                    await starting
                    state.started = True
                reply = ModelReply(content=rest, tool_calls=calls, message=assistant,
                                   usage=Usage(prompt_tokens=len(context), completion_tokens=len(ids)),
                                   finish_reason="stop" if stopped else "length", latency_s=latency,
                                   started_at=started, tool_calls_from_text=True, tool_call_errors=errors)
                if not stopped and len(rec.response_ids) >= cfg.max_response_tokens:
                    # the budget cut this turn: the rollout ends here, before the step could end it another
                    # way (a last turn would otherwise read as max_steps, untruncated); its calls are not run
                    rec.truncated = True
                    env.episode.end(ExitReason.CONTEXT_LENGTH, f"the response reached its budget of "
                                                               f"{cfg.max_response_tokens} tokens mid-turn")
                    reply.notes.append(f"cut at the response budget: {len(calls)} tool call(s) not run")
                    traj.add_step(step_record(rec.num_turns, reply, None))
                    state.env_s += time.perf_counter() - t_env
                    break
                rec.tool_calls += len(calls)
                result = await env.step(calls, errors, tokens=len(context) + len(ids), as_text=True)
                state.env_s += time.perf_counter() - t_env
                messages.extend(result.messages)
                traj.add_step(step_record(rec.num_turns, reply, result))
                if result.done:
                    break
                observation = chat.observation_ids(result.messages, stopped)
                if len(rec.response_ids) + len(observation) >= cfg.max_response_tokens:
                    rec.truncated = True
                    env.episode.end(ExitReason.CONTEXT_LENGTH, f"the response reached its budget of "
                                                               f"{cfg.max_response_tokens} tokens")
                    break
                rec.response_ids += observation
                rec.response_mask += [0] * len(observation)
                state.logprobs += [None] * len(observation)
            t_env = time.perf_counter()
            state.answer = await env.answer_file(state.skipped)
            state.env_s += time.perf_counter() - t_env
            traj.sandbox.update(env.sandbox.info() if env.sandbox else {})
        finally:
            if not starting.done():
                starting.cancel()
                await asyncio.gather(starting, return_exceptions=True)
            elif not starting.cancelled() and starting.exception() is not None:
                env.episode.end_on_error(starting.exception())
            rec.response_logprobs = state.logprobs if state.have_logprobs else None
            try:
                await env.close()
            except Exception as e:
                log.warning("rollout %s: sandbox not removed: %s", rec.id, e)


class _State:
    """What a rollout has gathered so far (kept when it is cut short)."""

    def __init__(self, record: RolloutRecord):
        self.record = record
        self.episode = Episode()
        self.trajectory = Trajectory(run_id=record.id)
        self.logprobs: list[Optional[float]] = []
        self.have_logprobs = False
        self.answer: Optional[str] = None
        self.skipped: list[Skipped] = []
        self.generate_s = 0.0
        self.env_s = 0.0
        self.started = False
