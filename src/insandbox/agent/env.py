"""The environment side of a run, usable without the agent loop (e.g. by an RL trainer
that produces tokens itself):

    async with SandboxEnv(EnvConfig(max_steps=20)) as env:
        for task in tasks:
            messages = await env.reset(task)       # a fresh sandbox and fresh tools each time
            while not done:
                result = await env.step(tool_calls, tokens=n)   # -> tool messages, done, exit_reason
            answer = await env.read_answer()
    # leaving the block removes every sandbox the env created

It owns one episode at a time: the sandbox, the tools (the editor's undo history is per
episode), the step count and the "steps left" note the model sees, the limits (through
`Episode`), and reading the answer and the output files back.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from ..core import defaults
from ..core.episode import Episode, ExitReason, Limits
from ..models.tool_text import tool_response_message
from ..prompts import PromptConfig, load_prompt_config
from ..sandbox import (
    CopyLimits,
    CopyResult,
    OperationError,
    Sandbox,
    SandboxError,
    SandboxLimits,
    SandboxSpec,
    Skipped,
    create_sandbox,
)
from ..sandbox.admission import Admission
from ..sandbox.base import require
from ..sandbox.pool import SandboxPool
from ..tools import Tool, ToolBox, ToolCall, ToolOutput, default_tools

log = logging.getLogger(__name__)

NUDGE = "Continue with execute_bash or str_replace_editor, or call submit if the task is done."
MAX_ANSWER_BYTES = 1024 * 1024
TEXT_CALL_EXAMPLE = '<tool_call>{"name": "execute_bash", "arguments": {"command": "ls"}}</tool_call>'


def no_calls_hint(n: int, tool_format: str = defaults.TOOL_FORMAT) -> str:
    """The note the trajectory and the console get after `n` replies in a row without a tool call: the likely
    cause and what to try, for the tool format in use (text mode has no server template to blame)."""
    if tool_format == "text":
        return (f"hint: none of the model's last {n} replies held a tool call. With --tool-format text, calls are "
                f"read from the reply, written as {TEXT_CALL_EXAMPLE} (or that JSON alone); no such block was "
                "found. If the model writes its calls another way, say so in its prompt (--prompt-config); if its "
                "server parses tool calls (vLLM --enable-auto-tool-choice, llama-server --jinja), try "
                "--tool-format native.")
    return (f"hint: the model server has returned no tool call for {n} replies in a row. If its chat template "
            "or tool parser does not handle tools (llama-server without --jinja, vLLM without "
            "--enable-auto-tool-choice --tool-call-parser ..., a model trained without tools), try "
            "--tool-format text: the tools then go into the system prompt and calls are read from the text.")


@dataclass
class Task:
    prompt: str
    id: str = ""
    input_dir: Optional[Path] = None  # host folder whose contents go to the sandbox's input folder
    input_files: dict[str, Union[str, bytes]] = field(default_factory=dict)  # in-memory files, same place


@dataclass
class EnvConfig:
    prompts: PromptConfig = field(default_factory=load_prompt_config)
    image: str = defaults.IMAGE
    limits: SandboxLimits = field(default_factory=SandboxLimits)  # the sandbox's resources
    env_vars: dict = field(default_factory=dict)
    max_steps: int = defaults.MAX_STEPS
    token_budget: Optional[int] = None
    time_limit: Optional[float] = None  # seconds per episode, sandbox start included
    stuck_after: Optional[int] = defaults.STUCK_AFTER  # identical steps in a row: `stuck`; None: off
    max_tool_calls_per_reply: int = defaults.MAX_TOOL_CALLS_PER_REPLY  # run in order; the rest answered "not run"
    command_timeout: float = defaults.COMMAND_TIMEOUT_S
    output_limit_chars: int = defaults.OUTPUT_LIMIT  # per observation
    copy_limits: CopyLimits = field(default_factory=CopyLimits)  # what comes back from the output folder
    backend: str = defaults.BACKEND
    run_id: str = ""
    pool: Optional[SandboxPool] = None  # take started sandboxes from it and give them back (bench, RL)
    pool_url: Optional[str] = None  # without a pool: take them from this sandbox service (`insandbox pool serve`)
    admission: Optional[Admission] = None  # the session's way through the admission gate (None: the process's)

    def episode_limits(self) -> Limits:
        return Limits(max_steps=self.max_steps, token_budget=self.token_budget, time_limit=self.time_limit,
                      stuck_after=self.stuck_after)

    def sandbox_spec(self) -> SandboxSpec:
        return SandboxSpec(image=self.image, workdir=self.prompts.working_dir, limits=self.limits, env=self.env_vars,
                           run_id=self.run_id, output_limit_chars=self.output_limit_chars, admission=self.admission)


@dataclass
class Observation:
    call: ToolCall
    output: ToolOutput
    duration_s: float


@dataclass
class StepResult:
    messages: list[dict]  # to append to the conversation: the tools' results, or a nudge
    observations: list[Observation]
    done: bool
    submitted: bool
    nudged: bool = False
    tool_time_s: float = 0.0
    exit_reason: Optional[ExitReason] = None  # set when done
    exit_detail: Optional[str] = None
    nudge_reason: Optional[str] = None


@dataclass
class Collected:
    """What came back from the sandbox at the end of an episode."""

    answer: Optional[str] = None
    files: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)  # the answer file and output entries not copied


ToolsFactory = Callable[[], Iterable[Tool]]


class SandboxEnv:
    def __init__(self, config: Optional[EnvConfig] = None, tools: Optional[ToolsFactory] = None):
        """`tools` makes a fresh set of tools for each episode (default: the three standard ones)."""
        self.config = config or EnvConfig()
        c = self.config
        self._make_tools = tools or (lambda: default_tools(c.command_timeout, c.prompts.working_dir,
                                                           c.output_limit_chars))
        self.toolbox = ToolBox(self._make_tools())
        self.sandbox: Optional[Sandbox] = None
        self.episode: Optional[Episode] = None
        self._started = False  # the current episode's sandbox is up
        self._open: list[Sandbox] = []  # created by this env and not removed yet
        self._served = None  # the sandbox service's pool, made on first use when config.pool_url names one
        self.ready_s: Optional[float] = None  # this episode: from reset() to the sandbox ready for commands
        self._snapshot = None  # a forked env: the snapshot its sandbox was started from (released at close)

    async def __aenter__(self) -> SandboxEnv:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ------------------------------------------------------------------ state
    @property
    def tool_schemas(self) -> list[dict]:
        return self.toolbox.schemas()

    @property
    def snapshot_timings(self) -> dict:
        """A forked env: how long taking the snapshot it started from took (empty otherwise)."""
        return dict(self._snapshot.timings) if self._snapshot is not None else {}

    @property
    def steps_left(self) -> int:
        return self.episode.steps_left if self.episode else self.config.max_steps

    @property
    def done(self) -> bool:
        return self.episode is not None and self.episode.done

    @property
    def submitted(self) -> bool:
        return self.episode is not None and self.episode.submitted

    # ------------------------------------------------------------------ episode
    def prompt_messages(self, task: Task) -> list[dict]:
        """The system and user messages of a task; needs no sandbox (a first model call can start early)."""
        return self.config.prompts.sandbox_messages(task.prompt)

    def reset(self, task: Task) -> Awaitable[list[dict]]:
        """Begin a new episode and return an awaitable that removes the previous sandbox, starts a
        fresh one with the task's input files, and gives the episode's first messages.

        The new episode (step count, limits and clock, fresh tools) exists as soon as reset()
        returns, so a caller may start the first model request while the sandbox starts."""
        self.episode = Episode(self.config.episode_limits())
        self.toolbox = ToolBox(self._make_tools())
        previous, self.sandbox, self._started = self.sandbox, None, False
        return self._start(task, previous)

    async def _start(self, task: Task, previous: Optional[Sandbox]) -> list[dict]:
        if previous is not None:
            await self._remove(previous, quietly=True)
        c, p = self.config, self.config.prompts
        t0 = time.perf_counter()
        if c.pool is None and c.pool_url and self._served is None:
            from ..sandbox.served import make_pool

            self._served = make_pool(c.sandbox_spec(), c.backend, c.pool_url)
        pool = c.pool or self._served
        if pool is not None:
            sandbox = await pool.acquire()
            self._open.append(sandbox)
            self.sandbox = sandbox
        else:
            sandbox = create_sandbox(c.sandbox_spec(), c.backend)
            self._open.append(sandbox)
            self.sandbox = sandbox
            await sandbox.start()
        if task.input_dir is not None:
            await sandbox.copy_in(Path(task.input_dir), p.input_dir)
        if task.input_files:
            files = {k: v.encode("utf-8") if isinstance(v, str) else v for k, v in task.input_files.items()}
            await sandbox.copy_in_files(files, p.input_dir)
        res = await sandbox.exec(["mkdir", "-p", "--", p.input_dir, p.output_dir])
        if res.exit_code != 0:
            raise SandboxError(f"cannot create {p.input_dir} and {p.output_dir}: {res.stderr.strip()}")
        self._started = True
        self.ready_s = time.perf_counter() - t0
        return self.prompt_messages(task)

    async def step(self, tool_calls: list[ToolCall], parse_errors: Optional[list[str]] = None, *,
                   tokens: int = 0, as_text: bool = False) -> StepResult:
        """Run one model turn's tool calls, in order; a turn without calls gets a nudge.

        `tokens`: what the turn cost (prompt + completion), for the token budget. `as_text`: the
        calls were written as <tool_call> text, so their results go back as text too."""
        ep = self.episode
        if ep is None or self.sandbox is None or not self._started:
            raise RuntimeError("no episode in progress: await env.reset(task) first")
        if ep.done:
            raise RuntimeError(f"the episode is over ({ep.exit_reason}); call reset() for a new one")
        observations, tool_time, submitted = [], 0.0, False
        cap = self.config.max_tool_calls_per_reply
        for i, call in enumerate(tool_calls):
            if submitted:
                out, took = ToolOutput("Not run: submit was called earlier in this reply.", error=True), 0.0
            elif i >= cap:  # every call still gets its answer (an OpenAI-compatible server wants one per id)
                out, took = ToolOutput(f"Not run: this reply made {len(tool_calls)} tool calls and at most {cap} run "
                                       f"per reply. Make this call again in a later reply if you still need it.",
                                       error=True), 0.0
            else:
                with ep.timing("tools"):  # the model's own commands: a time limit spent here is its doing
                    out, took = await self.toolbox.call(self.sandbox, call)
            submitted = submitted or out.submitted
            tool_time += took
            observations.append(Observation(call, out, took))
        nudge_reason = None
        if not tool_calls:
            nudge_reason = ("your tool call could not be read: " + "; ".join(parse_errors) if parse_errors
                            else "your reply had no tool call")
        ep.after_step(tokens, submitted, _signature(observations, nudge_reason))
        note = "" if ep.done else self.steps_note()
        messages = self._messages(observations, parse_errors or [], nudge_reason, as_text, note)
        return StepResult(messages, observations, ep.done, ep.submitted, nudge_reason is not None, tool_time,
                          ep.exit_reason, ep.exit_detail, nudge_reason)

    @staticmethod
    def _messages(observations: list[Observation], parse_errors: list[str], nudge_reason: Optional[str],
                  as_text: bool, note: str) -> list[dict]:
        """What goes back to the model; the steps-left note ends the last result (inside its block)."""
        tail = f"\n\n{note}" if note else ""
        if nudge_reason is not None:
            return [{"role": "user", "content": f"{nudge_reason[0].upper()}{nudge_reason[1:]}. {NUDGE}{tail}"}]
        outputs = [o.output.text for o in observations]
        outputs[-1] += tail
        if as_text:
            extra = "".join(f"\nA tool call could not be read: {e}" for e in parse_errors)
            return [tool_response_message(outputs, extra.strip())]
        return [{"role": "tool", "tool_call_id": o.call.id, "content": out} for o, out in zip(observations, outputs)]

    def steps_note(self) -> str:
        left = self.steps_left
        if left == 1:
            return "[1 step left: this is your last reply. Make sure the answer is written, then call submit.]"
        return f"[{left} steps left]"

    async def fork(self, n: int, config: Optional[EnvConfig] = None) -> list[SandboxEnv]:
        """n environments that go on from this episode as it is now, each in a sandbox of its own
        (for RL groups sharing a prefix, or "what if" at step k): the files, the shell's working
        directory, variables, functions and aliases, the step and token counts and the editor's undo
        history are copied; processes are not. They continue independently of each other and of this
        env. `config` (default: this env's) gives the branches their limits (the time limit then counts
        from the fork); the sandbox settings stay the snapshot's and the tools this env's. Close each
        branch (or use it as `async with`): the snapshot's image goes with the last one."""
        import copy

        if self.sandbox is None or not self._started or self.episode is None:
            raise RuntimeError("no episode in progress: await env.reset(task) first")
        if n < 1:
            raise ValueError("fork needs n >= 1")
        require(type(self.sandbox), "snapshot", "snapshot a sandbox (fork needs it)")
        snap = await self.sandbox.snapshot()
        try:
            sandboxes = await snap.start_copies(n)
        except BaseException:
            await snap.remove()
            raise
        branch_config = copy.copy(config or self.config)
        if branch_config.pool is not None:
            branch_config.pool = None  # a snapshot's copy is no fresh sandbox: it never goes back to a pool
        branches = []
        for sandbox in sandboxes:
            env = SandboxEnv(branch_config, self._make_tools)
            env.toolbox = copy.deepcopy(self.toolbox)
            env.episode = copy.deepcopy(self.episode)
            if config is not None:
                env.episode.limits = config.episode_limits()
                env.episode.restart_clock()
            env.sandbox, env._open, env._started, env._snapshot = sandbox, [sandbox], True, snap
            snap.acquire()
            branches.append(env)
        return branches

    # ------------------------------------------------------------------ results
    async def read_answer(self) -> Optional[str]:
        """The answer file's text: {working_dir}/answer.txt, else {output_dir}/answer.txt."""
        return await self.answer_file([])

    async def answer_file(self, skipped: list[Skipped]) -> Optional[str]:
        """The answer file's text. Never blocks and never fails: an answer file that cannot be read
        (a dangling link, a FIFO, a directory, too big) is recorded in `skipped` and the next place
        is tried."""
        if self.sandbox is None or not self._started:
            return None
        p = self.config.prompts
        for path in (f"{p.working_dir}/answer.txt", f"{p.output_dir}/answer.txt"):
            try:
                real, st = await self.sandbox.resolve(path)
                if st is None:
                    if real != path:
                        skipped.append(Skipped(path, f"symbolic link to {real}, which does not exist"))
                    continue
                if not st.is_file:
                    skipped.append(Skipped(path, f"a {st.kind}, not a regular file: not read as the answer"))
                    continue
                if st.size > MAX_ANSWER_BYTES:
                    skipped.append(Skipped(path, f"{st.size:,} bytes, over the {MAX_ANSWER_BYTES:,}-byte limit "
                                                 "for an answer: not read", st.size))
                    continue
                data = await self.sandbox.read_file(real, max_bytes=MAX_ANSWER_BYTES)
            except OperationError as e:
                skipped.append(Skipped(path, f"not read: {e}"))
                continue
            return data.decode("utf-8", "replace")
        return None

    async def collect_outputs(self, host_dir: Path) -> CopyResult:
        """Copy the output folder's files to host_dir, file by file within config.copy_limits."""
        if self.sandbox is None or not self._started:
            return CopyResult()
        return await self.sandbox.copy_out(self.config.prompts.output_dir, Path(host_dir), self.config.copy_limits)

    async def collect(self, files_dir: Path) -> Collected:
        """The answer and the output files, with everything that was left behind and why."""
        out = Collected()
        out.answer = await self.answer_file(out.skipped)
        copied = await self.collect_outputs(files_dir)
        out.files = copied.files
        out_dir = self.config.prompts.output_dir.rstrip("/")
        out.skipped += [Skipped(f"{out_dir}/{s.path}", s.reason, s.size) for s in copied.skipped]
        return out

    # ------------------------------------------------------------------ lifetime
    async def close(self) -> None:
        """Remove every sandbox this env created (also after failures; safe to call again)."""
        errors = []
        for sandbox in list(self._open):
            try:
                await self._remove(sandbox)
            except SandboxError as e:
                errors.append(e)
        self.sandbox, self._started = None, False
        if self._snapshot is not None and not self._open:
            snap, self._snapshot = self._snapshot, None
            await snap.release()
        if self._served is not None:
            served, self._served = self._served, None
            await served.close()
        if errors:
            raise errors[0]

    async def _remove(self, sandbox: Sandbox, quietly: bool = False) -> None:
        pool = self.config.pool or self._served
        if pool is not None:  # back to the pool: recycled for another episode, or removed there
            if sandbox in self._open:
                self._open.remove(sandbox)
                pool.release(sandbox)
            return
        try:
            await sandbox.close()
        except SandboxError as e:
            if not quietly:
                raise
            log.warning("could not remove the previous sandbox (close() will try again): %s", e)
            return
        if sandbox in self._open:
            self._open.remove(sandbox)


def _signature(observations: list[Observation], nudge_reason: Optional[str]) -> Optional[tuple]:
    """What a step called and what it got back: equal signatures in a row mean a stuck loop.
    A turn without calls has none (it called nothing, so it repeated no call)."""
    if nudge_reason is not None:
        return None
    return tuple((o.call.name, o.call.arguments, o.output.text) for o in observations)
