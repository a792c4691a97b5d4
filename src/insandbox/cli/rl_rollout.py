"""`insandbox rl rollout`: token-level rollouts of task rows, one JSONL record per rollout.

    insandbox rl rollout --data tasks/rows.jsonl --out runs/rollouts --repeats 4 --concurrency 8   # embedded model
    insandbox rl rollout --data rows.jsonl --out out --policy ./my-checkpoint                       # transformers
    insandbox rl rollout -c rollout.yaml --data rows.jsonl --out out                                # a config file

Its settings are RolloutConfig's (rl/rollout/runner.py), with its defaults: the sandbox options and the
episode's limits are those of `insandbox run` (options.py), declared once; the sampling options default
to RolloutConfig's (core/defaults.py).

Writes OUT/rollouts.jsonl (RolloutRecord per line, written as each finishes) and OUT/summary.json
(reward per group, exit reasons, rollouts per minute, sandbox share of rollout time, and the
decode check of every record): Rollouts.run_all, rl/rollout/output.py.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from ..core import defaults
from .options import CONFIG, LIMITS, SANDBOX, settings, shared_options

SAMPLING = "Sampling"
REWARD = "Reward"
# RolloutConfig's defaults where they differ from a run's, in the command line's terms (stuck_after 0: never)
ROLLOUT_DEFAULTS = {"max_steps": defaults.ROLLOUT_MAX_STEPS, "time_limit": defaults.ROLLOUT_TIME_LIMIT_S,
                    "stuck_after": 0}

if TYPE_CHECKING:
    from ..rl.rollout.output import RolloutsResult


@shared_options(*LIMITS, *SANDBOX, defaults_of=ROLLOUT_DEFAULTS)
def rollout(
    data: Annotated[str, typer.Option(help="Task rows: a JSONL (as `insandbox rl build-data` writes it), a "
                                           "save_to_disk folder (FOLDER[:SPLIT]) or hf:NAME[:CONFIG[:SPLIT]] "
                                           "(split: train).", metavar="ROWS", show_default=False)],
    out: Annotated[Path, typer.Option(help="Output folder (rollouts.jsonl, summary.json).", metavar="DIR",
                                      show_default=False)],
    repeats: Annotated[int, typer.Option(help="Rollouts per task row (a GRPO group).")] = 1,
    concurrency: Annotated[int, typer.Option(help="Rollouts in flight at once, each in its own "
                                                  "sandbox.")] = defaults.CONCURRENCY,
    limit: Annotated[Optional[int], typer.Option(help="Only the first N rows.")] = None,
    policy: Annotated[Optional[str], typer.Option(help="The policy: a transformers model folder (or hub name when "
                                                       "online).", metavar="MODEL",
                                                  show_default="the GGUF model of --gguf")] = None,
    gguf: Annotated[Optional[Path], typer.Option(help="A GGUF model run through llama.cpp.", metavar="FILE",
                                                 show_default="the embedded SmolLM2-135M-Instruct")] = None,
    max_response_tokens: Annotated[int, typer.Option(
        help="Model and environment tokens after the prompt.", metavar="TOKENS",
        rich_help_panel=SAMPLING)] = defaults.ROLLOUT_RESPONSE_TOKENS,
    max_tokens: Annotated[int, typer.Option(help="Tokens the policy may sample per model call.", metavar="TOKENS",
                                            rich_help_panel=SAMPLING)] = defaults.ROLLOUT_MAX_TOKENS,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (0: greedy).",
                                               rich_help_panel=SAMPLING)] = defaults.ROLLOUT_TEMPERATURE,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling.", rich_help_panel=SAMPLING)] = 1.0,
    seed: Annotated[int, typer.Option(help="Sampler seed.", rich_help_panel=SAMPLING)] = 0,
    scoring: Annotated[str, typer.Option(help="Reward scoring: strict, or paper (the official LLM-in-Sandbox-RL "
                                              "reward, which pays for hedging).", metavar="SCORING",
                                         rich_help_panel=REWARD)] = "strict",
    multi_choice: Annotated[str, typer.Option(help="Multi-choice reward: exact (the set) or f1.", metavar="HOW",
                                              rich_help_panel=REWARD)] = "exact",
    open_answer: Annotated[str, typer.Option(help="Open-answer reward: exact or f1.", metavar="HOW",
                                             rich_help_panel=REWARD)] = "exact",
    ray: Annotated[Optional[str], typer.Option("--ray", help="Run the sandboxes on a Ray cluster: auto or its "
                                                             "ADDRESS (the policy stays on this machine).",
                                               metavar="ADDRESS")] = None,
    config: CONFIG = None,  # applied before this is called (config_file.py)
    *, shared: dict,  # the values of the options in LIMITS and SANDBOX (options.py)
) -> None:
    """Run token-level rollouts of task rows in sandboxes and write one record per rollout."""
    from ..core.data_source import DataError
    from ..rl.rewards import RewardConfig
    from ..rl.schema import read_task_rows
    from .common import BadArgument, fail, run_until_done

    try:
        rows = read_task_rows(data, limit, command="rl rollout")
    except DataError as e:
        fail(f"--data {e}")
    try:
        config = rollout_config(shared, max_response_tokens=max_response_tokens, max_tokens=max_tokens,
                                temperature=temperature, top_p=top_p)
        reward = RewardConfig(scoring=scoring, multi_choice=multi_choice, open=open_answer)
    except BadArgument as e:
        fail(str(e))
    except ValueError as e:
        from pydantic import ValidationError

        from ..config import describe
        fail(describe(e) if isinstance(e, ValidationError) else str(e))
    if ray:
        from ..config import ConfigError
        from ..distributed.cluster import connect

        try:
            connect(ray)  # before anything is loaded: a wrong address is one line at once
        except ConfigError as e:
            fail(str(e))
    result, sig = run_until_done(lambda: run_rollouts(rows, out, config, reward, repeats, concurrency, policy, gguf,
                                                      seed, ray=ray))
    if sig is not None:
        raise typer.Exit(128 + sig)
    typer.echo(json.dumps(result.summary, indent=1))


def rollout_config(shared: dict, **sampling):
    """The RolloutConfig of the command line's values: the shared options by their table (options.py), the
    sampling ones as they are. BadArgument or pydantic's ValidationError for a bad value."""
    from ..rl.rollout.runner import RolloutConfig

    return RolloutConfig(**settings(shared) | sampling)


async def run_rollouts(rows: list[dict], out: Path, config, reward, n: int, concurrency: int,
                       model: Optional[str], gguf: Optional[Path], seed: int,
                       ray: Optional[str] = None) -> RolloutsResult:
    """The policy loaded, then Rollouts.run_all (rl/rollout/output.py writes the folder). With `ray` (a
    cluster address or "auto"), the sandboxes run on the cluster's nodes and the policy in one actor on
    this machine's node (distributed/rollouts.py)."""
    from functools import partial

    from ..config import RunConfig, SandboxSettings
    from ..rl.rollout.backends import load_policy
    from ..rl.rollout.runner import Rollouts
    from ..runs.session import prepare_sandbox

    if not ray:
        sandbox = {name: getattr(config, name) for name in SandboxSettings.model_fields}
        await prepare_sandbox(RunConfig(**sandbox | {"build_image": True}))
        tokenizer, generate = load_policy(model=model, gguf=gguf, seed=seed)
        return await Rollouts(tokenizer, config, reward).run_all(rows, generate, out, n=n, concurrency=concurrency)
    from ..distributed.cluster import connect, disconnect
    from ..distributed.rollouts import RayRollouts

    connected = connect(ray)
    remote = None
    try:
        remote = RayRollouts(partial(load_policy, model=model, gguf=gguf, seed=seed), config, reward, concurrency)
        return await remote.run_all(rows, out, n)
    finally:
        if remote is not None:
            await remote.close()
        if connected:
            disconnect()
