"""Typed record of one run, saved as trajectory.json after every step.

`messages` is the conversation exactly as the model saw it. `steps` holds one record
per model call with what the numbers are about: latency, tokens, every tool call with
its observation, exit code and duration. A model request that failed for good is in
`failed_requests` (its time counts in the totals). Entries of the output folder that were
not copied back are in `output_skipped`, with the reason: a bounded record (the first ones,
then how many more by reason; sandbox/copyback.py). Readers should check `schema_version`.

Cost: `price` is the price the model's calls were charged at (pricing.py: which entry of the
price table, or "local", or "unknown"); each step's `cost_usd` follows from its tokens, and
`totals.cost_usd` is their sum. Both are None where the price is unknown, never 0.

Schema versions: 1 first release; 2 adds failed_requests, output_skipped,
steps[].nudge_reason, totals.failed_requests, and the exit reasons `stuck` and
`internal_error`; 3 adds price, steps[].cache_write_tokens, steps[].cost_usd,
steps[].time_to_first_token_s, steps[].logprobs and totals.cost_usd. Older files load as
they are.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, Field, ValidationError
from pydantic_core import PydanticSerializationError

from . import hostfiles
from .episode import ExitReason
from .json_input import BadJSON, parse_json
from .price import Price

SCHEMA_VERSION = 3


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


class ToolCallRecord(BaseModel):
    id: str
    name: str
    arguments: str  # raw, as the model sent it
    output: str = ""  # the observation the model got (before the steps-left note)
    error: bool = False
    exit_code: Optional[int] = None
    timed_out: bool = False
    output_chars: int = 0  # characters the tool produced before clipping
    duration_s: float = 0.0


class StepRecord(BaseModel):
    index: int  # 1-based
    started_at: float  # unix time the model request was sent
    model_latency_s: float = 0.0
    tool_time_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: Optional[int] = None
    cached_tokens: Optional[int] = None  # of prompt_tokens, read from the server's prompt cache
    cache_write_tokens: Optional[int] = None  # of prompt_tokens, written to it (Anthropic)
    cost_usd: Optional[float] = None  # None: the price is unknown
    usage_reported: bool = True
    finish_reason: Optional[str] = None
    time_to_first_token_s: Optional[float] = None  # streamed replies: request sent -> first token
    logprobs: Optional[list[dict]] = None  # --logprobs: each sampled token's {token, logprob[, top]}
    content: Optional[str] = None
    reasoning: Optional[str] = None
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    tool_calls_from_text: bool = False  # written as <tool_call> text; sent back as written
    nudged: bool = False  # no tool call could be run: the model got a reminder instead
    nudge_reason: Optional[str] = None  # why: no call in the reply, or why its call could not be read
    observation_chars: int = 0  # characters sent back to the model after this step
    notes: list[str] = Field(default_factory=list)


class FailedRequest(BaseModel):
    """A model request that failed for good (after the client's retries): it is in no step."""

    started_at: float  # unix time the request was sent
    latency_s: float  # until it was given up, retries included
    error: str
    exit_reason: Optional[ExitReason] = None  # what it ended the episode as


class SkippedOutput(BaseModel):
    """An entry of the output folder (or the answer file) that was not copied back."""

    path: str
    reason: str
    size: Optional[int] = None


class Totals(BaseModel):
    steps: int = 0
    failed_requests: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    model_time_s: float = 0.0  # failed requests included
    tool_time_s: float = 0.0
    wall_time_s: float = 0.0
    observation_chars: int = 0
    cost_usd: Optional[float] = None  # None: the price is unknown (failed requests cost nothing)


class Trajectory(BaseModel):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    mode: str = "sandbox"  # "sandbox" or "llm"
    created_at: str = Field(default_factory=now_iso)
    finished_at: Optional[str] = None
    # prompt, id, input files (names, input_digests), sandbox_dirs (its working, input and output folders)
    task: dict[str, Any] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)  # model and run settings (never the API key)
    sandbox: dict[str, Any] = Field(default_factory=dict)  # image, container, limits, start-up timings
    tools: list[dict] = Field(default_factory=list)  # the schemas offered to the model
    messages: list[dict] = Field(default_factory=list)
    steps: list[StepRecord] = Field(default_factory=list)
    failed_requests: list[FailedRequest] = Field(default_factory=list)
    exit_reason: Optional[ExitReason] = None
    exit_detail: Optional[str] = None
    # a failure's: "sandbox" (what ran in it broke it) or "infrastructure"; a time limit's: "commands" (the model's
    # tool calls took at least half the time) or "infrastructure" (the model server, the sandbox's start)
    exit_cause: Optional[str] = None
    submitted: bool = False
    answer: Optional[str] = None
    output_files: list[str] = Field(default_factory=list)
    output_skipped: list[SkippedOutput] = Field(default_factory=list)
    verification: Optional[dict[str, Any]] = None  # a verifier's look at the sandbox after the episode (Harbor)
    price: Optional[Price] = None  # what the model's calls cost; None: not priced (e.g. RL rollouts)
    totals: Totals = Field(default_factory=Totals)

    def set_price(self, price: Price) -> None:
        """Price the steps from now on (the run's total starts at 0 where the price is known)."""
        self.price = price
        self.totals.cost_usd = 0.0 if price.known else None

    def add_step(self, step: StepRecord) -> None:
        self.steps.append(step)
        t = self.totals
        if self.price is not None and self.price.known:
            step.cost_usd = self.price.cost(step.prompt_tokens, step.completion_tokens, step.cached_tokens,
                                            step.cache_write_tokens)
            t.cost_usd = round((t.cost_usd or 0.0) + step.cost_usd, 10)
        t.steps += 1
        t.tool_calls += len(step.tool_calls)
        t.prompt_tokens += step.prompt_tokens
        t.completion_tokens += step.completion_tokens
        t.total_tokens = t.prompt_tokens + t.completion_tokens
        t.model_time_s += step.model_latency_s
        t.tool_time_s += step.tool_time_s
        t.observation_chars += step.observation_chars

    def add_failed_request(self, failed: FailedRequest) -> None:
        self.failed_requests.append(failed)
        self.totals.failed_requests += 1
        self.totals.model_time_s += failed.latency_s

    def end(self, reason: Optional[ExitReason], detail: Optional[str] = None, cause: Optional[str] = None) -> None:
        self.exit_reason, self.exit_detail, self.exit_cause = reason, detail, cause
        self.submitted = reason is ExitReason.SUBMITTED

    def note(self, text: str) -> None:
        """Add to exit_detail (something that went wrong after the episode ended, e.g. in clean-up)."""
        self.exit_detail = f"{self.exit_detail}; {text}" if self.exit_detail else text

    def to_json(self) -> str:
        try:
            return self.model_dump_json(indent=1)
        except PydanticSerializationError:
            # text that is not valid Unicode (a lone surrogate from a server, a file name with
            # undecodable bytes): \u escapes keep it exactly, and the file is still valid JSON
            return json.dumps(self.model_dump(mode="json"), indent=1, ensure_ascii=True)

    def save(self, path: Path) -> None:
        """Write atomically, so a reader (or a killed run) never sees half a file."""
        write_json(Path(path), self.to_json())

    @classmethod
    def load(cls, path: Path) -> Trajectory:
        return cls.loads(Path(path).read_bytes(), path)

    @classmethod
    def loads(cls, text: bytes | str, path: Path | str = "trajectory.json") -> Trajectory:
        """From the file's bytes (or text), read by the caller (e.g. without following links); `path` for
        errors. Anything that is not a trajectory this version reads (not JSON, not UTF-8, nested deeper
        than json_input.MAX_DEPTH, a value of the wrong type) is a ValueError of one line."""
        try:
            data = parse_json(text)
        except BadJSON as e:
            raise ValueError(f"{path}: not JSON insandbox reads: {e}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a JSON {type(data).__name__}, not a trajectory")
        version = data.get("schema_version", 0)
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise ValueError(f"{path}: schema_version {version} is newer than this insandbox "
                             f"({SCHEMA_VERSION}); upgrade insandbox")
        try:
            traj = cls.model_validate(data)
        except ValidationError as e:
            raise ValueError(f"{path}: not a trajectory: {_first_error(e)}") from None
        if traj.schema_version > SCHEMA_VERSION:  # given as text ("9")
            raise ValueError(f"{path}: schema_version {traj.schema_version} is newer than this insandbox "
                             f"({SCHEMA_VERSION}); upgrade insandbox")
        return traj


def _first_error(e: ValidationError) -> str:
    """pydantic's first complaint, on one line: where (steps.0.index) and what."""
    errors = e.errors(include_url=False, include_input=False)
    if not errors:
        return "invalid"
    where = ".".join(str(x) for x in errors[0].get("loc", ())) or "the record"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return " ".join(f"{where}: {errors[0].get('msg', 'invalid')}{more}".split())[:300]


def write_json(path: Path, text: str) -> None:
    """A trajectory's JSON (Trajectory.to_json) to `path`, atomically: beside it, then renamed over."""
    tmp = path.with_name(path.name + ".tmp")
    hostfiles.write_text(tmp, text)  # never through a link someone left there
    os.replace(tmp, path)
