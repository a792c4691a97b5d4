"""`insandbox rl rollout`: token-level rollouts of task rows, one JSONL record per rollout.

    insandbox rl rollout --data tasks/rows.jsonl --out runs/rollouts --n 4 --concurrency 8          # embedded model
    insandbox rl rollout --data rows.jsonl --out out --model ./my-checkpoint                        # transformers

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

if TYPE_CHECKING:
    from ..rl.rollout.output import RolloutsResult


def rollout(
    data: Annotated[str, typer.Option(help="Task rows: a JSONL (as `insandbox rl build-data` writes it), a "
                                           "save_to_disk folder (FOLDER[:SPLIT]) or hf:NAME[:CONFIG[:SPLIT]] "
                                           "(default split: train).")],
    out: Annotated[Path, typer.Option(help="Output folder (rollouts.jsonl, summary.json).")],
    n: Annotated[int, typer.Option(help="Rollouts per task (a GRPO group).")] = 1,
    concurrency: Annotated[int, typer.Option(help="Rollouts in flight at once, each in its own sandbox.")] = 8,
    limit: Annotated[Optional[int], typer.Option(help="Only the first N rows.")] = None,
    model: Annotated[Optional[str], typer.Option(help="A transformers model folder (or hub name when online); "
                                                      "default: the embedded GGUF model through llama.cpp.")] = None,
    gguf: Annotated[Optional[Path], typer.Option(help="A GGUF model through llama.cpp (default: the embedded "
                                                      "SmolLM2-135M-Instruct).")] = None,
    max_turns: Annotated[int, typer.Option(help="Model turns per rollout.")] = 8,
    max_response_tokens: Annotated[int, typer.Option(help="Model and environment tokens after the prompt.")] = 4096,
    max_tokens_per_turn: Annotated[int, typer.Option(help="Tokens the model may sample per turn.")] = 512,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (0: greedy).")] = 1.0,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling.")] = 1.0,
    timeout: Annotated[float, typer.Option(help="Seconds a whole rollout may take.")] = 900.0,
    image: Annotated[str, typer.Option(help="Sandbox image.")] = defaults.IMAGE,
    backend: Annotated[str, typer.Option(help="Sandbox backend: docker, or bwrap (no engine, no root).")] = \
        defaults.BACKEND,
    network: Annotated[str, typer.Option(help="Sandbox network: bridge, none, registries or host.")] = \
        defaults.NETWORK,
    runtime: Annotated[Optional[str], typer.Option(help="The engine's container runtime, e.g. gvisor.")] = None,
    scoring: Annotated[str, typer.Option(help="Reward scoring: strict, or paper (the official LLM-in-Sandbox-RL "
                                               "reward, which pays for hedging).")] = "strict",
    multi_choice: Annotated[str, typer.Option(help="Multi-choice reward: exact (the set) or f1.")] = "exact",
    open_answer: Annotated[str, typer.Option("--open", help="Open-answer reward: exact or f1.")] = "exact",
    seed: Annotated[int, typer.Option(help="Sampler seed.")] = 0,
    ray: Annotated[Optional[str], typer.Option("--ray", help="Run the sandboxes on a Ray cluster: auto or its "
                                                             "ADDRESS (the policy stays on this machine).")] = None,
) -> None:
    """Run token-level rollouts of task rows in sandboxes and write one record per rollout."""
    from ..core.data_source import DataError
    from ..rl.rewards import RewardConfig
    from ..rl.rollout.runner import RolloutConfig
    from ..rl.schema import read_task_rows
    from .common import fail, run_until_done

    try:
        rows = read_task_rows(data, limit, command="rl rollout")
    except DataError as e:
        fail(f"--data {e}")
    try:
        config = RolloutConfig(max_turns=max_turns, max_response_tokens=max_response_tokens,
                               max_tokens_per_turn=max_tokens_per_turn, temperature=temperature, top_p=top_p,
                               timeout_s=timeout, image=image, backend=backend, network=network, runtime=runtime)
        reward = RewardConfig(scoring=scoring, multi_choice=multi_choice, open=open_answer)
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
    result, sig = run_until_done(lambda: run_rollouts(rows, out, config, reward, n, concurrency, model, gguf, seed,
                                                      ray=ray))
    if sig is not None:
        raise typer.Exit(128 + sig)
    typer.echo(json.dumps(result.summary, indent=1))


async def run_rollouts(rows: list[dict], out: Path, config, reward, n: int, concurrency: int,
                       model: Optional[str], gguf: Optional[Path], seed: int,
                       ray: Optional[str] = None) -> RolloutsResult:
    """The policy loaded, then Rollouts.run_all (rl/rollout/output.py writes the folder). With `ray` (a
    cluster address or "auto"), the sandboxes run on the cluster's nodes and the policy in one actor on
    this machine's node (distributed/rollouts.py)."""
    from functools import partial

    from ..config import RunConfig
    from ..rl.rollout.backends import load_policy
    from ..rl.rollout.runner import Rollouts
    from ..runs.session import prepare_sandbox

    if not ray:
        await prepare_sandbox(RunConfig(image=config.image, backend=config.backend, network=config.network,
                                        runtime=config.runtime, build_image=True))
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
