"""What a rollout takes and gives: the policy's sampler as a function over token ids, and one
record per rollout in the form trainers consume (TRL's rollout_func, verl's AgentLoopOutput)."""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic import BaseModel, Field, computed_field


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading token ids two sequences share (the part of a prefix cache that can be reused)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass
class SamplingParams:
    max_tokens: int = 1024  # for this turn
    temperature: float = 1.0
    top_p: float = 1.0
    stop_token_ids: list[int] = field(default_factory=list)  # the end of an assistant turn (set by the rollout)
    seed: Optional[int] = None


@dataclass
class Sampled:
    """One turn as the policy sampled it."""

    token_ids: list[int]  # the sampled ids, a stop token included when it ended on one
    logprobs: Optional[list[float]] = None  # one per sampled id, when the sampler gives them
    finish_reason: str = "stop"  # "stop" (ended on a stop token) or "length" (ran out of max_tokens)
    policy_version: Optional[int] = None  # the weights' version that sampled it, when the sampler knows it


# (context ids, sampling params) -> the continuation the policy sampled
GenerateFn = Callable[[list[int], SamplingParams], Awaitable[Sampled]]


class RolloutRecord(BaseModel):
    """One rollout, token for token. response_ids hold the model's turns and what the environment
    answered between them; response_mask is 1 where the model sampled the token, 0 for environment
    tokens (tool observations, chat-template glue). Decoding prompt_ids + response_ids gives back
    the conversation the environment saw, rendered by the chat template."""

    id: str  # "<task id>/g<group>/s<sample>"
    task_id: str
    group: int = 0
    sample: int = 0
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: Optional[list[Optional[float]]] = None  # aligned with response_ids; None at env tokens
    reward: float = 0.0
    reward_detail: dict[str, Any] = Field(default_factory=dict)
    exit_reason: Optional[str] = None
    exit_detail: Optional[str] = None
    # a failure's: "sandbox" (its own processes broke it) or "infrastructure"; a time limit's: "commands" (spent
    # in the model's tool calls: scored, penalised) or "infrastructure" (waiting on the sampler: masked)
    exit_cause: Optional[str] = None
    # left out of the loss: the rollout says nothing about the model (an infrastructure failure, a time
    # limit spent waiting on the sampler, an interruption); its reward is the error value and trainers ignore it
    masked: bool = False
    truncated: bool = False  # the response ran out of tokens
    num_turns: int = 0  # model turns
    tool_calls: int = 0
    timings: dict[str, float] = Field(default_factory=dict)  # generate_s, env_s, reward_s, wall_s
    # the policy version that sampled each model turn (weights may change between turns: an update in
    # flight), and the record's version: the oldest of them, which staleness is measured by (staleness.py)
    policy_versions: list[Optional[int]] = Field(default_factory=list)
    policy_version: Optional[int] = None
    trajectory: dict[str, Any] = Field(default_factory=dict)  # as trajectory.json of `insandbox run`

    @computed_field  # type: ignore[prop-decorator]
    @property
    def logprobs(self) -> Optional[list[Optional[float]]]:
        """One log-probability per model token (response_mask 1), in order: what importance sampling and
        most trainers read; response_logprobs has the same values aligned with response_ids."""
        if self.response_logprobs is None:
            return None
        return [lp for lp, m in zip(self.response_logprobs, self.response_mask) if m]
