"""Rollouts: the policy samples tokens, the sandbox answers, the record keeps every id.

One rollout of one task row is an episode of agent.loop (as `insandbox run` runs one), with the
policy as its model: a TokenClient (token_client.py) that keeps the token record.

    prompt_ids = template(system, task) + assistant header
    repeat:                                                  # agent.loop
        sampled = generate(prompt_ids + response_ids)        # the policy's own sampler (the client)
        response_ids += sampled     (mask 1, logprobs kept)
        calls = the tool calls written in the sampled text   # read from the text, as --tool-format text
        results = env.step(calls)                            # a real sandbox
        response_ids += observation ids  (mask 0)           # tokenized once, never re-rendered
    until the episode ends, or the response reaches its token budget (truncated)
    reward = compute_reward(row, answer file, exit reason)

Many rollouts run at once, each in its own sandbox; `run_groups` makes GRPO groups of n samples
per task. A rollout never raises: a failing sampler, an engine fault or a rollout past its timeout
spent waiting on the sampler gives a record with the exit reason, the error, the reward config's
error value and `masked` set (trainers leave it out of the loss: it says nothing about the model).
A sandbox its own processes broke (exit_cause "sandbox") is the model's doing: it is trained on,
with the broken-sandbox penalty. So is a timeout spent mostly in the model's own commands
(exit_cause "commands", core/episode.py: `sleep 100000` every turn): scored, with the time-limit
penalty. A turn cut by the response budget ends the rollout as context_length, truncated, its
tool calls not run.
"""
from __future__ import annotations

import asyncio
import logging
import time
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Optional

from pydantic import ConfigDict, Field, model_validator

from ...agent.env import EnvConfig, SandboxEnv, Task
from ...agent.loop import run_episode
from ...config import SandboxSettings, TaskLimits
from ...config.sections import with_default
from ...core import defaults
from ...core.episode import Episode, ExitReason
from ...core.trajectory import SkippedOutput, Trajectory
from ...prompts import PromptConfig, load_prompt_config
from ...sandbox import Skipped
from ...sandbox.admission import Admission
from ...sandbox.pool import SandboxPool
from ...sandbox.served import make_pool
from ..rewards import Outcome, RewardConfig, RewardResult, broken_sandbox_reward
from .chat import ChatFormat
from .output import RolloutsResult, write_rollouts
from .token_client import TokenClient
from .types import GenerateFn, RolloutRecord

log = logging.getLogger(__name__)

PROMPTS = Path(__file__).resolve().parents[1] / "prompts.yaml"
# besides the failures (model_error, internal_error, an engine's sandbox_error): endings that say
# nothing about the model, so trainers leave the rollout out of the loss; a time limit only when the
# time went to the sampler or the sandbox's start, not to the model's own commands (see `masked_ending`)
MASKED_EXITS = frozenset({ExitReason.TIME_LIMIT, ExitReason.INTERRUPTED})
RewardFn = Callable[[dict, Outcome, RewardConfig], Awaitable[RewardResult]]


class RolloutConfig(SandboxSettings, TaskLimits):
    """How rollouts run (also the `rollout:` section of a training config, and `insandbox rl rollout`'s
    options). The sandbox's settings and an episode's limits are the sections a run has
    (config/sections.py: declared and checked there once), with the defaults rollouts need (core/defaults.py):
    16 model turns, a 900 s time limit, no `stuck` ending (as in the paper). A time limit past which the
    model's own commands took most of the time is scored; else the rollout is masked."""

    model_config = ConfigDict(extra="forbid", frozen=False)

    max_steps: int = with_default(TaskLimits, "max_steps", defaults.ROLLOUT_MAX_STEPS)  # model turns per episode
    time_limit: Optional[float] = with_default(TaskLimits, "time_limit", defaults.ROLLOUT_TIME_LIMIT_S)
    stuck_after: Optional[int] = with_default(TaskLimits, "stuck_after", None)
    max_response_tokens: int = Field(default=defaults.ROLLOUT_RESPONSE_TOKENS, ge=16)  # model and environment tokens
    max_tokens: int = Field(default=defaults.ROLLOUT_MAX_TOKENS, ge=1)  # sampled per turn
    temperature: float = Field(default=defaults.ROLLOUT_TEMPERATURE, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    prompt_config: Optional[Path] = None  # default: rl/prompts.yaml (material in /testbed/documents)
    template_kwargs: dict[str, Any] = Field(default_factory=dict)  # e.g. {"enable_thinking": false}
    pool: bool = True  # rollouts of a run_groups() call share a pool of started sandboxes (sandbox/pool.py)
    recycle: bool = True  # ...recycled between rollouts where the engine allows (sandbox/recycle.py)

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        return with_new_names(data)

    @property
    def max_turns(self) -> int:  # the name before 0.3
        return self.max_steps

    @property
    def max_tokens_per_turn(self) -> int:  # the name before 0.3
        return self.max_tokens

    @property
    def timeout_s(self) -> Optional[float]:  # the name before 0.3
        return self.time_limit

    def prompts(self) -> PromptConfig:
        return load_prompt_config(self.prompt_config or PROMPTS)

    def env_config(self, run_id: str = "") -> EnvConfig:
        """The episode's environment. Its time limit stays the runner's (`Rollouts.run`), which tells whose
        time it was."""
        limits = self.episode_fields() | {"time_limit": None}
        return EnvConfig(prompts=self.prompts(), run_id=run_id, **limits, **self.env_fields())


RENAMED = {"max_turns": "max_steps", "max_tokens_per_turn": "max_tokens", "timeout_s": "time_limit"}


def with_new_names(data: Any) -> Any:
    """RolloutConfig's settings with the names before one vocabulary (until 0.3: max_turns,
    max_tokens_per_turn, timeout_s) given their new ones, each with a DeprecationWarning; an old name wins
    over a new one beside it (a training config's file over its preset)."""
    if not isinstance(data, dict) or not any(old in data for old in RENAMED):
        return data
    data = dict(data)
    for old, new in RENAMED.items():
        if old in data:
            warnings.warn(f"RolloutConfig's {old} is now {new} (the old name goes in 0.3)", DeprecationWarning,
                          stacklevel=3)
            data[new] = data.pop(old)
    return data


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
        # --max-sandboxes: this object's rollouts live that many sandboxes at most (None: the process's gate)
        self.env_template.admission = Admission(self.config.max_sandboxes) if self.config.max_sandboxes else None
        self.chat = ChatFormat(tokenizer, SandboxEnv(self.env_template).tool_schemas, self.config.template_kwargs)
        self.pool: Optional[SandboxPool] = None  # while run_groups() runs (or a caller's own)

    # ------------------------------------------------------------------ many
    async def run_groups(self, rows: list[dict], generate: GenerateFn, n: int = 8,
                         concurrency: int = defaults.CONCURRENCY,
                         on_record: Optional[Callable[[RolloutRecord], None]] = None) -> list[RolloutRecord]:
        """n rollouts of every row (a GRPO group each), at most `concurrency` sandboxes at once;
        records in row order, then sample order."""
        gate = asyncio.Semaphore(concurrency)
        own_pool = self.pool is None and (self.config.pool or bool(self.config.served_by()))
        if own_pool:  # a sandbox service's (--pool-url), else this process's
            self.pool = make_pool(self.env_template.sandbox_spec(), self.env_template.backend,
                                  self.config.served_by(), size=defaults.pool_size(concurrency),
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

    async def run_all(self, rows: list[dict], generate: GenerateFn, folder: Path, n: int = 8,
                      concurrency: int = 8) -> RolloutsResult:
        """run_groups, written to `folder` as `insandbox rl rollout` writes it (output.py): rollouts.jsonl
        record by record as each finishes, then summary.json with the decode check of every record."""
        return await write_rollouts(folder, self.chat, lambda write: self.run_groups(
            rows, generate, n=n, concurrency=concurrency, on_record=write))

    # ------------------------------------------------------------------ one
    async def run(self, row: dict, generate: GenerateFn, group: int = 0, sample: int = 0) -> RolloutRecord:
        """One rollout of one task row; never raises."""
        task_id = str(row.get("id", ""))
        state = _State(RolloutRecord(id=f"{task_id}/g{group}/s{sample}", task_id=task_id, group=group, sample=sample,
                                     prompt_ids=[], response_ids=[], response_mask=[]))
        t0 = time.perf_counter()
        limit = self.config.time_limit
        try:
            await _within(self._episode(row, generate, state), limit,
                          lambda: state.episode.end_on_time(f"the rollout took longer than {limit:g}s"))
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
        elif masked_ending(episode):
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
        """The episode through agent.loop, the policy as its model (TokenClient): the loop asks, acts
        and ends it; the client keeps the token record."""
        cfg, rec = self.config, state.record
        env = state.env = SandboxEnv(self.config.env_config(run_id=rec.task_id[:24]))
        env.config.pool, env.config.admission = self.pool, self.env_template.admission
        task = Task(prompt=str(row["problem_statement"]), id=rec.task_id,
                    input_files=dict(row.get("input_files") or {}))
        traj = state.trajectory = Trajectory(run_id=rec.id, task={"id": rec.task_id, "prompt": task.prompt,
                                                                   "input_files": sorted(task.input_files)},
                                             config={"rollout": cfg.model_dump(mode="json"),
                                                     "reward": self.reward_config.model_dump(mode="json")},
                                             tools=env.tool_schemas)
        client = state.client = TokenClient(self.chat, generate, max_response_tokens=cfg.max_response_tokens,
                                            max_tokens_per_turn=cfg.max_tokens,
                                            temperature=cfg.temperature, top_p=cfg.top_p)
        t0 = time.perf_counter()
        try:
            await run_episode(env, client, task, traj)
            episode = state.episode
            if episode.exit_reason is not None and episode.exit_reason.is_failure:
                log.warning("rollout %s failed: %s", rec.id, episode.exit_detail)
            else:
                # a failed episode (the sampler, the engine, the sandbox) is not read: its answer counts for
                # nothing, and a broken sandbox might not answer
                state.answer = await env.answer_file(state.skipped)
                traj.sandbox.update(env.sandbox.info() if env.sandbox else {})
        finally:
            state.env_s = time.perf_counter() - t0 - client.generate_s
            tokens = client.record
            rec.prompt_ids, rec.response_ids, rec.response_mask = (tokens.prompt_ids, tokens.response_ids,
                                                                   tokens.response_mask)
            rec.response_logprobs, rec.truncated = tokens.response_logprobs, tokens.truncated
            rec.num_turns, rec.tool_calls = client.turns, client.tool_calls
            rec.policy_versions, rec.policy_version = list(tokens.policy_versions), tokens.policy_version
            try:
                await env.close()
            except Exception as e:
                log.warning("rollout %s: sandbox not removed: %s", rec.id, e)


def masked_ending(episode: Episode) -> bool:
    """The episode ended on nothing the model did: a failure of the sampler, the engine or insandbox, an
    interruption, or a time limit spent waiting on the sampler or the sandbox (not in its own commands)."""
    reason = episode.exit_reason
    if reason is ExitReason.TIME_LIMIT and episode.exit_cause == "commands":
        return False
    return reason is None or reason in MASKED_EXITS or reason.is_failure


async def _within(aw: Awaitable[None], timeout: Optional[float], on_timeout: Callable[[], None]) -> None:
    """Await `aw`, at most `timeout` seconds; past it, call on_timeout() and then cancel it (so the
    episode ends as the time limit, before the loop sees the cancellation as an interruption)."""
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise
    if not done:
        on_timeout()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return
    task.result()


class _State:
    """What a rollout has gathered so far (kept when it is cut short)."""

    def __init__(self, record: RolloutRecord):
        self.record = record
        self.env: Optional[SandboxEnv] = None
        self.client: Optional[TokenClient] = None
        self._episode = Episode()  # until the env has one
        self.trajectory = Trajectory(run_id=record.id)
        self.answer: Optional[str] = None
        self.skipped: list[Skipped] = []
        self.env_s = 0.0

    @property
    def episode(self) -> Episode:
        return self.env.episode if self.env is not None and self.env.episode is not None else self._episode

    @property
    def generate_s(self) -> float:
        return self.client.generate_s if self.client is not None else 0.0
