"""insandbox's agent loop for verl: one rollout of one task row in a real sandbox, sampled by verl's
rollout servers through the server manager verl gives every agent loop.

    a verl dataset row (verl_data.py writes them; agent_name "insandbox")
      -> InSandboxAgentLoop.run(sampling_params, **row)
           task   = the row's `insandbox_task` (the task row, as JSON)
           record = Rollouts.run(task, ServerManagerSampler(server_manager))      a sandbox of its own
      -> AgentLoopOutput(prompt_ids, response_ids, response_mask (0 at sandbox and template tokens),
                         response_logprobs, reward_score (the outcome reward), num_turns, metrics, extra_fields
                         (policy_versions: verl's parameter version per model turn, policy_version the oldest))

The reward is computed inside the loop, while the sandbox still holds the answer file; verl puts
reward_score on the last response token (rm_scores) and skips its own reward functions. A masked
record (an infrastructure failure, the rollout's time limit) comes back with a response_mask of
zeros: the actor's loss never sees it, and the recipe's advantage estimator (verl_advantage.py,
"insandbox_rloo") leaves it out of its group's baseline. A sandbox its own processes broke is
trained on, with the broken-sandbox penalty as its reward.

Settings come from the agent-loop YAML verl loads (actor_rollout_ref.rollout.agent.agent_loop_config_path);
every key besides name and _target_ reaches the constructor:

    - name: insandbox
      _target_: insandbox.rl.trainers.verl_agent_loop.InSandboxAgentLoop
      rollout: {max_steps: 100, max_tokens: 8192, time_limit: 3600}   # RolloutConfig
      reward: {multi_choice: exact, open: exact}                                # RewardConfig
      reward_fn: null                  # "package.module:function" in place of insandbox.rl.rewards.compute_reward
      max_concurrent_rollouts: null    # sandboxes at once per agent-loop worker process (null: no limit)
      records_dir: null                # a folder: every RolloutRecord appended as JSONL, one file per process

From verl's own config: the response budget (rollout.response_length), the prompt limit
(rollout.prompt_length), the sampling params (rollout.temperature, top_p, top_k, calculate_log_probs;
val_kwargs when validating) and the chat-template kwargs (data.apply_chat_template_kwargs).
"""
from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import socket
from collections import OrderedDict
from pathlib import Path
from typing import Any, Optional
from uuid import uuid4

from omegaconf import DictConfig, ListConfig, OmegaConf
from pydantic import BaseModel, ConfigDict, Field
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, _agent_loop_registry, register

from ...core.episode import ExitReason
from ..rewards import RewardConfig
from ..rollout.runner import RewardFn, RolloutConfig, Rollouts
from ..rollout.types import RolloutRecord
from .config import reward_section
from .verl_advantage import NAME as _ADVANTAGE  # noqa: F401  (registers "insandbox_rloo" in this process too)
from .verl_data import AGENT_NAME, TASK_COLUMN
from .verl_sampler import ServerManagerSampler

log = logging.getLogger(__name__)

# reward_extra_info: numbers only, the same keys for every rollout (verl stacks and averages them)
REWARD_INFO_KEYS = ("correct", "answered", "truncated", "failed", "masked", "broken_sandbox", "model_turns",
                    "tool_calls")


class LoopSettings(BaseModel):
    """The insandbox keys of the agent-loop YAML."""

    model_config = ConfigDict(extra="forbid")

    rollout: dict[str, Any] = Field(default_factory=dict)
    reward: dict[str, Any] = Field(default_factory=dict)
    reward_fn: Optional[str] = None
    max_concurrent_rollouts: Optional[int] = Field(default=None, ge=1)
    records_dir: Optional[Path] = None


def register_unless_configured(name: str) -> Any:
    """verl's `register`, but an entry the agent-loop YAML already put under `name` is kept. verl's worker
    loads the YAML before it builds a loop; building the first one imports this module, and a plain
    `register` then replaced the YAML's entry (its settings: rollout, reward, records_dir, ...) with the
    bare class, so every later rollout of that worker ran on the defaults."""
    def decorator(cls: type) -> type:
        return cls if name in _agent_loop_registry else register(name)(cls)

    return decorator


@register_unless_configured(AGENT_NAME)
class InSandboxAgentLoop(AgentLoopBase):
    def __init__(self, *args: Any, rollout: Any = None, reward: Any = None, reward_fn: Optional[str] = None,
                 max_concurrent_rollouts: Optional[int] = None, records_dir: Optional[str] = None,
                 tools: Any = None, **kwargs: Any):
        super().__init__(*args, **kwargs)  # verl's tools (tools=) are not used: the sandbox brings its own
        self.settings = LoopSettings(rollout=_plain(rollout) or {}, reward=reward_section(_plain(reward)) or {},
                                     reward_fn=reward_fn,
                                     max_concurrent_rollouts=max_concurrent_rollouts, records_dir=records_dir)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        self.rollouts = _shared_rollouts(self.tokenizer, self._rollout_config(), RewardConfig(**self.settings.reward),
                                         self.settings.reward_fn)

    def _rollout_config(self) -> RolloutConfig:
        fields = dict(self.settings.rollout)
        if "max_response_tokens" in fields and fields["max_response_tokens"] != self.response_length:
            log.warning("rollout.max_response_tokens=%s in the agent-loop YAML is replaced by verl's "
                        "rollout.response_length=%d", fields["max_response_tokens"], self.response_length)
        fields["max_response_tokens"] = self.response_length  # verl's tensors are this long
        fields["template_kwargs"] = {**dict(self.apply_chat_template_kwargs or {}), **fields.get("template_kwargs", {})}
        fields.setdefault("temperature", float(self.rollout_config.temperature))  # recorded; verl's params rule
        fields.setdefault("top_p", float(self.rollout_config.top_p))
        return RolloutConfig(**fields)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        task = task_row(kwargs)
        group = int(kwargs.get("index", 0) or 0)
        sample = _sample_number(kwargs)
        prompt_ids = self.rollouts.chat.prompt_ids(self.rollouts.env_template.prompts.sandbox_messages(
            str(task["problem_statement"])))
        if len(prompt_ids) > self.prompt_length:  # cutting the prompt would cut the system prompt: refuse
            raise ValueError(f"task {task.get('id')!r}: its prompt has {len(prompt_ids)} tokens, more than "
                             f"rollout.prompt_length={self.prompt_length}; raise data.max_prompt_length or drop "
                             f"the row (verl_data.py --max-prompt-length does)")
        request_id = self._request_id(group, sample)
        sampler = self._sampler(sampling_params, request_id)
        async with _gate(self.settings.max_concurrent_rollouts):
            record = await self.rollouts.run(task, sampler, group=group, sample=sample)
        output = self._output(record, sampler, request_id)
        if self.settings.records_dir is not None:
            _append_record(self.settings.records_dir, record, {
                "global_steps": kwargs.get("global_steps"), "uid": kwargs.get("uid"), "request_id": request_id,
                "temperature": sampling_params.get("temperature"), **self._record_tags(output)})
        return output

    def _sampler(self, sampling_params: dict[str, Any], request_id: str) -> ServerManagerSampler:
        return ServerManagerSampler(self.server_manager, sampling_params, request_id)

    def _record_tags(self, output: AgentLoopOutput) -> dict[str, Any]:
        """What a variant adds to the record it writes to records_dir, beside the record itself."""
        return {}

    def _request_id(self, group: int, sample: int) -> str:
        """One id for all turns of a rollout (verl routes them to one server: its prefix cache holds the context)."""
        if self.rollout_config.get("full_determinism", False):
            return f"insandbox-{group}-{sample}"
        return uuid4().hex

    def _output(self, record: RolloutRecord, sampler: ServerManagerSampler, request_id: str) -> AgentLoopOutput:
        response_ids = record.response_ids[: self.response_length]
        response_mask = record.response_mask[: self.response_length]
        if record.masked:  # no loss, and no place in its group's baseline (verl_advantage.py)
            response_mask = [0] * len(response_mask)
        logprobs = None
        if record.response_logprobs is not None:
            logprobs = [lp if lp is not None else 0.0 for lp in record.response_logprobs[: self.response_length]]
        if not response_ids:  # nothing sampled (the sampler failed at once): one masked token keeps verl's shapes
            response_ids, response_mask = [self.rollouts.chat.stop_token_ids[0]], [0]
            logprobs = [0.0] if logprobs is not None else None
        if logprobs is None and sampler.sampling_params.get("logprobs"):
            # verl stacks every row's logprobs when it asked for them: a rollout that sampled nothing before it
            # failed or ran out of time has none, and would break the whole batch (its tokens are masked anyway)
            logprobs = [0.0] * len(response_ids)
        exit_reason = record.exit_reason or ""
        info = {"correct": float(record.reward_detail.get("correct", 0.0)),
                "answered": float(record.trajectory.get("answer") is not None),
                "truncated": float(record.truncated), "failed": float(_failed(exit_reason, record.exit_cause)),
                "masked": float(record.masked), "broken_sandbox": float(record.exit_cause == "sandbox"),
                "model_turns": float(record.num_turns), "tool_calls": float(record.tool_calls)}
        extra = {
            "turn_scores": [], "tool_rewards": [],  # the keys verl's own loops fill
            "min_global_steps": sampler.min_global_steps, "max_global_steps": sampler.max_global_steps,
            # the parameter version that sampled each model turn, and the oldest of them (None: unknown)
            "policy_versions": list(record.policy_versions), "policy_version": record.policy_version,
            "reward_extra_info": info,
            "insandbox": {"record_id": record.id, "request_id": request_id, "task_id": record.task_id,
                          "exit_reason": exit_reason,
                          "exit_detail": record.exit_detail, "reward_detail": _jsonable(record.reward_detail),
                          "timings": dict(record.timings)},
        }
        timings = record.timings
        return AgentLoopOutput(
            prompt_ids=record.prompt_ids, response_ids=response_ids, response_mask=response_mask,
            response_logprobs=logprobs, reward_score=float(record.reward),
            num_turns=2 * record.num_turns if record.num_turns else 1,  # the task, model turns, answers between
            metrics={"generate_sequences": timings.get("generate_s", 0.0), "tool_calls": timings.get("env_s", 0.0),
                     "compute_score": timings.get("reward_s", 0.0),
                     "num_preempted": sampler.num_preempted if sampler.num_preempted is not None else -1},
            extra_fields=extra)


def _failed(exit_reason: str, exit_cause: Optional[str] = None) -> bool:
    """The rollout ended on a failure of the sampler, the sandbox or its clock, not on the model's terms (a
    time limit spent in the model's own commands is its own)."""
    try:
        reason = ExitReason(exit_reason)
    except ValueError:
        return True
    return reason.is_failure or (reason is ExitReason.TIME_LIMIT and exit_cause != "commands")


def task_row(row: dict[str, Any]) -> dict[str, Any]:
    """The task row a verl dataset row carries."""
    raw = row.get(TASK_COLUMN)
    if raw is None:
        raise KeyError(f"the dataset row has no {TASK_COLUMN!r} column: convert task rows with "
                       f"`python -m insandbox.rl.trainers.verl_data`")
    task = json.loads(raw) if isinstance(raw, (str, bytes)) else dict(raw)
    for key in ("id", "problem_statement"):
        if key not in task:
            raise KeyError(f"the task row has no {key!r}")
    return task


# ---------------------------------------------------------------------- per process
# verl builds an agent loop per sample; what is costly to build (the chat format, probed from the
# template) or must be shared (the sandbox gate) lives once per worker process.
_ROLLOUTS: dict[tuple, Rollouts] = {}
_GATES: dict[tuple[int, int], asyncio.Semaphore] = {}
_SAMPLES: OrderedDict[str, int] = OrderedDict()


def _shared_rollouts(tokenizer: Any, config: RolloutConfig, reward: RewardConfig, reward_fn: Optional[str]) -> Rollouts:
    key = (id(tokenizer), config.model_dump_json(), reward.model_dump_json(), reward_fn)
    if key not in _ROLLOUTS:
        _ROLLOUTS[key] = Rollouts(tokenizer, config, reward, reward_fn=load_reward_fn(reward_fn) if reward_fn else None)
    return _ROLLOUTS[key]


class _NoGate:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: Any) -> None:
        return None


def _gate(limit: Optional[int]) -> Any:
    if limit is None:
        return _NoGate()
    key = (id(asyncio.get_running_loop()), limit)
    if key not in _GATES:
        _GATES[key] = asyncio.Semaphore(limit)
    return _GATES[key]


def load_reward_fn(path: str) -> RewardFn:
    """"package.module:function" (or "package.module.function") -> the async reward function."""
    module, _, name = path.partition(":") if ":" in path else path.rpartition(".")
    fn = getattr(importlib.import_module(module), name, None)
    if fn is None or not callable(fn):
        raise ValueError(f"reward_fn {path!r}: no such function")
    return fn


def _sample_number(row: dict[str, Any]) -> int:
    """The s<k> of the record id: verl's V1 trainer gives the rollout's number in its group (session_id);
    its legacy trainer gives none, but numbers the step's rollouts (priority, unique in the step);
    else (a worker driven directly) rollouts are counted per uid in this process."""
    for key in ("session_id", "priority"):
        if row.get(key) is not None:
            return int(row[key])
    key = str(row.get("uid"))
    _SAMPLES[key] = _SAMPLES.pop(key, -1) + 1
    while len(_SAMPLES) > 10000:
        _SAMPLES.popitem(last=False)
    return _SAMPLES[key]


def _append_record(folder: Path, record: RolloutRecord, tags: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    line = json.dumps({**_jsonable(tags), **record.model_dump(mode="json")}, ensure_ascii=False)
    with open(folder / f"{socket.gethostname()}-{os.getpid()}.jsonl", "a", encoding="utf-8") as f:
        f.write(line + "\n")


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value


def _jsonable(value: Any) -> Any:
    """Numpy scalars and the like as plain JSON values."""
    return json.loads(json.dumps(value, default=lambda v: v.item() if hasattr(v, "item") else str(v)))
