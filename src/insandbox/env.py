"""The environment side of a run, usable without the agent loop (e.g. by an RL trainer
that produces tokens itself):

    env = SandboxEnv(EnvConfig())
    messages = await env.reset(Task("Compute 2**100 and write it to /testbed/answer.txt"))
    result = await env.step(tool_calls)        # -> tool messages, done
    answer = await env.read_answer()
    await env.close()

It owns the sandbox, the tools, the step count (and the "steps left" note the model
sees) and reading the answer back.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from .prompts import PromptConfig, load_prompt_config
from .sandbox import Sandbox, SandboxError, SandboxLimits, SandboxSpec, create_sandbox
from .tools import Tool, ToolBox, ToolCall, ToolOutput, default_tools

NUDGE = ("Your reply had no tool call. Continue with execute_bash or str_replace_editor, or call submit if the "
         "task is done.")
MAX_ANSWER_BYTES = 1024 * 1024


@dataclass
class Task:
    prompt: str
    id: str = ""
    input_dir: Optional[Path] = None  # host folder whose contents go to the sandbox's input folder
    input_files: dict[str, Union[str, bytes]] = field(default_factory=dict)  # in-memory files, same place


@dataclass
class EnvConfig:
    prompts: PromptConfig = field(default_factory=load_prompt_config)
    image: str = "insandbox:latest"
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    env_vars: dict = field(default_factory=dict)
    max_steps: int = 100
    command_timeout: float = 120.0
    output_limit_chars: int = 16000  # per observation
    max_output_bytes: int = 1024 ** 3  # copied back from the output folder at most
    backend: str = "docker"
    run_id: str = ""


@dataclass
class Observation:
    call: ToolCall
    output: ToolOutput
    duration_s: float


@dataclass
class StepResult:
    messages: list[dict]  # to append to the conversation: one tool message per call, or a nudge
    observations: list[Observation]
    done: bool
    submitted: bool
    nudged: bool = False
    tool_time_s: float = 0.0


class SandboxEnv:
    def __init__(self, config: Optional[EnvConfig] = None, tools: Optional[list[Tool]] = None,
                 sandbox: Optional[Sandbox] = None):
        self.config = config or EnvConfig()
        p = self.config.prompts
        self.toolbox = ToolBox(tools or default_tools(self.config.command_timeout, p.working_dir,
                                                      self.config.output_limit_chars))
        self.sandbox = sandbox
        self.steps_taken = 0
        self.submitted = False

    @property
    def tool_schemas(self) -> list[dict]:
        return self.toolbox.schemas()

    @property
    def steps_left(self) -> int:
        return max(self.config.max_steps - self.steps_taken, 0)

    @property
    def done(self) -> bool:
        return self.submitted or self.steps_left == 0

    # ------------------------------------------------------------------ episode
    def initial_messages(self, task: Task) -> list[dict]:
        """The system and user messages; needs no sandbox (the first model call can start early)."""
        return self.config.prompts.sandbox_messages(task.prompt)

    async def start(self, task: Task) -> None:
        """Start the sandbox and put the task's input files in place."""
        p, c = self.config.prompts, self.config
        if self.sandbox is None:
            self.sandbox = create_sandbox(SandboxSpec(image=c.image, workdir=p.working_dir, limits=c.limits,
                                                      env=c.env_vars, run_id=c.run_id,
                                                      output_limit_chars=c.output_limit_chars), c.backend)
        await self.sandbox.start()
        if task.input_dir is not None:
            await self.sandbox.copy_in(Path(task.input_dir), p.input_dir)
        if task.input_files:
            files = {k: v.encode("utf-8") if isinstance(v, str) else v for k, v in task.input_files.items()}
            await self.sandbox.copy_in_files(files, p.input_dir)
        res = await self.sandbox.exec(["mkdir", "-p", "--", p.input_dir, p.output_dir])
        if res.exit_code != 0:
            raise SandboxError(f"cannot create {p.input_dir} and {p.output_dir}: {res.stderr.strip()}")

    async def reset(self, task: Task) -> list[dict]:
        self.steps_taken, self.submitted = 0, False
        messages = self.initial_messages(task)
        await self.start(task)
        return messages

    async def step(self, tool_calls: list[ToolCall], parse_errors: Optional[list[str]] = None) -> StepResult:
        """Run one model turn's tool calls, in order. A turn without calls gets a nudge."""
        if self.done:
            raise RuntimeError("the episode is over (submitted or out of steps); call reset()")
        self.steps_taken += 1
        observations, messages, tool_time = [], [], 0.0
        for call in tool_calls:
            if self.submitted:
                out, took = ToolOutput("Not run: submit was called earlier in this reply.", error=True), 0.0
            else:
                out, took = await self.toolbox.call(self.sandbox, call)
            self.submitted = self.submitted or out.submitted
            tool_time += took
            observations.append(Observation(call, out, took))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": out.text})
        nudged = not tool_calls
        if nudged:
            text = NUDGE
            if parse_errors:
                text = "Your tool call could not be read: " + "; ".join(parse_errors) + "\n" + NUDGE
            messages.append({"role": "user", "content": text})
        if not self.submitted and self.steps_left > 0:
            messages[-1]["content"] += "\n\n" + self.steps_note()
        return StepResult(messages, observations, self.done, self.submitted, nudged, tool_time)

    def steps_note(self) -> str:
        left = self.steps_left
        if left == 1:
            return "[1 step left: this is your last reply. Make sure the answer is written, then call submit.]"
        return f"[{left} steps left]"

    async def read_answer(self) -> Optional[str]:
        """The answer file: {working_dir}/answer.txt, else {output_dir}/answer.txt."""
        if self.sandbox is None:
            return None
        p = self.config.prompts
        for path in (f"{p.working_dir}/answer.txt", f"{p.output_dir}/answer.txt"):
            st = await self.sandbox.stat(path)
            if st is not None and not st.is_dir:
                data = await self.sandbox.read_file(path, max_bytes=MAX_ANSWER_BYTES)
                return data.decode("utf-8", "replace")
        return None

    async def collect_outputs(self, host_dir: Path) -> list[str]:
        """Copy everything under the output folder to host_dir; returns the files written."""
        if self.sandbox is None:
            return []
        return await self.sandbox.copy_out(self.config.prompts.output_dir, Path(host_dir),
                                           self.config.max_output_bytes)

    async def close(self) -> None:
        if self.sandbox is not None:
            await self.sandbox.close()
