"""`insandbox rl train` and `insandbox rl export`.

    insandbox rl train CONFIG.yaml                                   # a config file (optionally on a preset)
    insandbox rl train --preset smoke --out runs/smoke               # CPU, minutes: SmolLM2-135M, shipped tasks
    insandbox rl train --preset paper --data rows.jsonl --out runs/paper --model ./Qwen3-4B-Instruct-2507
    insandbox rl export runs/smoke/final --out smoke.gguf            # for llama.cpp / insandbox bench --gguf

Exit status: 0 trained (or exported); 1 the sandbox, the model or the converter failed; 2 a bad
config or argument (one line, nothing created).
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def train(
    config: Annotated[Optional[Path], typer.Argument(
        help="Training config YAML: model, data, out, preset, grpo:, rollout:, reward: (see the presets).")] = None,
    preset: Annotated[Optional[str], typer.Option(
        help="A built-in preset under the config: smoke (CPU, minutes) or paper (the paper's recipe, GPU).")] = None,
    out: Annotated[Optional[Path], typer.Option(
        help="Output folder: final/ checkpoint, metrics.jsonl, tensorboard/, rollouts/, summary.json.")] = None,
    data: Annotated[Optional[Path], typer.Option(
        help="Task rows JSONL, as `insandbox rl build-data` writes them (smoke default: four shipped rows).")] = None,
    policy: Annotated[Optional[str], typer.Option(
        help="The policy: a transformers folder, a hub name, a .gguf file, or 'embedded' (SmolLM2-135M GGUF).",
        metavar="MODEL")] = None,
    train_steps: Annotated[Optional[int], typer.Option(help="Optimizer steps (grpo.max_steps).", min=1)] = None,
    async_steps: Annotated[Optional[int], typer.Option(
        help="Rollout batches produced ahead while the trainer trains, at most (grpo.async_steps; 0: synchronous).",
        min=0)] = None,
    limit: Annotated[Optional[int], typer.Option(help="Only the first N task rows.", min=1)] = None,
    concurrency: Annotated[Optional[int], typer.Option(help="Sandboxes in flight during a rollout batch.",
                                                       min=1)] = None,
) -> None:
    """Train a policy with GRPO (TRL) on context tasks, its rollouts in real sandboxes."""
    from ..rl.trainers.config import ConfigError, load_config, preset_names
    from .common import fail

    if config is None and preset is None:
        fail(f"give a CONFIG.yaml or --preset NAME ({', '.join(preset_names())})")
    if config is not None and not config.is_file():
        fail(f"{config}: no such config file")
    overrides = {"preset": preset, "out": _text(out), "data": _text(data), "model": policy, "limit": limit,
                 "concurrency": concurrency}
    grpo = {k: v for k, v in (("max_steps", train_steps), ("async_steps", async_steps)) if v is not None}
    if grpo:
        overrides["grpo"] = grpo
    try:
        settings = load_config(config, overrides)
    except ConfigError as e:
        fail(f"{config or 'preset ' + str(preset)}: {e}")
    _train(settings)


def _text(path: Optional[Path]) -> Optional[str]:
    return None if path is None else str(path)


def _train(settings) -> None:
    from ..config import ConfigError as RunConfigError
    from ..rl.trainers.config import ConfigError
    from ..rl.trainers.trl_train import train as run_training
    from ..sandbox import SandboxError, kill_all_now
    from .common import fail

    try:
        run_training(settings, echo=typer.echo)
    except (ConfigError, RunConfigError) as e:
        fail(str(e))
    except SandboxError as e:
        fail(f"sandbox: {e}", code=1)
    except KeyboardInterrupt:
        kill_all_now()  # rollouts in flight remove their sandboxes as they unwind; this catches the rest
        typer.echo("\ninsandbox: interrupted; checkpoints saved so far are kept", err=True)
        raise typer.Exit(130) from None


def export(
    checkpoint: Annotated[Path, typer.Argument(
        help="A transformers checkpoint folder, e.g. OUT/final or OUT/checkpoints/checkpoint-N.")],
    out: Annotated[Path, typer.Option(help="The GGUF file to write.")],
    outtype: Annotated[str, typer.Option(help="Tensor type: f32 (exact), f16, bf16 or q8_0.")] = "f16",
    converter: Annotated[Optional[Path], typer.Option(
        help="A llama.cpp convert_hf_to_gguf.py to use.", metavar="FILE",
        show_default="the installed llama-cpp-python version's, fetched once into ~/.cache/insandbox/llama-convert")
    ] = None,
    check: Annotated[bool, typer.Option(
        help="Load the GGUF in llama.cpp and compare its greedy tokens with the checkpoint's.")] = True,
) -> None:
    """Export a trained checkpoint to GGUF (for the embedded server and `insandbox bench --gguf`)."""
    from ..rl.trainers.export import OUTTYPES, ExportError, compare_greedy, export_gguf
    from .common import fail

    if not (checkpoint / "config.json").is_file():
        fail(f"{checkpoint}: not a transformers checkpoint (no config.json)")
    if outtype not in OUTTYPES:
        fail(f"--outtype {outtype}: one of {', '.join(OUTTYPES)}")
    if converter is not None and not converter.is_file():
        fail(f"--converter {converter}: no such file")
    try:
        path = export_gguf(checkpoint, out, outtype, converter)
    except ExportError as e:
        fail(str(e), code=1)
    typer.echo(f"[export] {path} ({path.stat().st_size / 2**20:.0f} MiB, {outtype})")
    if check:
        found = compare_greedy(checkpoint, path)
        n = len(found.transformers_ids)
        typer.echo(f"[export] greedy tokens, transformers vs llama.cpp: {found.agreeing}/{n} leading tokens agree"
                   + ("" if found.same else f" (transformers {found.transformers_ids}, llama.cpp "
                                            f"{found.llama_cpp_ids})"))
