"""recipes/verl/fully_async: our config on top of verl's own fully_async_ppo_trainer.yaml, composed by
Hydra as verl's entry point does; every key in verl's schema; the paper's values shared with the
synchronous recipe; verl's rollouter constructed on it (its asserts, its step and staleness
arithmetic); verl's sample feed keeping our agent; and verl's real fully async entry point run on
this machine up to where its trainer asks Ray for GPUs."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

from insandbox.models.local_server import default_gguf
from insandbox.rl.trainers.verl_agent_loop import InSandboxAgentLoop, LoopSettings
from insandbox.rl.trainers.verl_async import ASYNC_AGENT_NAME, InSandboxAsyncAgentLoop
from insandbox.rl.trainers.verl_cpu_server import export_gguf_as_hf
from insandbox.rl.trainers.verl_data import AGENT_NAME, verl_rows, write_parquet

# verl's trainer modules say at import which optional engines are missing (torchtitan, veomni, automodel):
# not this recipe's concern, and a ModuleNotFoundError in the warnings summary reads as a failure
pytestmark = pytest.mark.filterwarnings("ignore:.*engine is not available:UserWarning")

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "recipes" / "verl"
OURS = RECIPE / "fully_async" / "rloo_qwen3_4b.yaml"


def verl_async_config_dir() -> Path:
    import verl.experimental.fully_async_policy as fully_async

    return Path(fully_async.__file__).parent / "config"


def compose(overrides: list[str] = (), ours: bool = True) -> DictConfig:
    """verl's fully_async_ppo_trainer (the primary config of its entry point), with ours added as
    `--config-dir recipes/verl +fully_async=rloo_qwen3_4b` adds it: the recipe folder on verl's search path."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    config_dir = verl_async_config_dir()
    searchpath = list(OmegaConf.load(config_dir / "fully_async_ppo_trainer.yaml").hydra.searchpath)
    extra = [f"hydra.searchpath=[{','.join([*searchpath, f'file://{RECIPE}'])}]"]
    if ours:
        extra.append("+fully_async=rloo_qwen3_4b")
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return hydra_compose("fully_async_ppo_trainer", overrides=[*extra, *overrides])


def leaves(node, prefix: str = "") -> dict[str, object]:
    """Every leaf of a plain config as {dotted.path: value} (interpolations unresolved)."""
    out: dict[str, object] = {}
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(leaves(value, path + "."))
        else:
            out[path] = value
    return out


def has_key(config: DictConfig, path: str) -> bool:
    """The dotted key is in the config (a mandatory `???` value, as verl's rollout.name, counts)."""
    node = config
    for part in path.split("."):
        if not isinstance(node, DictConfig) or part not in node.keys():
            return False
        node = node._get_node(part)
    return True


def raw(path: Path) -> dict:
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    folder = tmp_path_factory.getbasetemp() / "smollm2-hf"
    if not (folder / "config.json").is_file():
        export_gguf_as_hf(default_gguf(), folder)
    return folder


def test_every_key_of_ours_is_in_verls_fully_async_schema():
    """A misspelt key would merge silently: each one must already be in verl's own composed config."""
    verls = compose(ours=False)
    ours = leaves(raw(OURS))
    missing = [path for path in ours if not has_key(verls, path)]
    assert missing == []
    assert len(ours) > 50  # the whole recipe, not a stub


def test_it_keeps_the_papers_values_of_the_synchronous_recipe():
    """Every key the two recipes share has the same value, but for what the fully async trainer
    asks otherwise (its GPU split, its feed of one task at a time, the agent loop's name kept)."""
    sync = leaves({k: v for k, v in raw(RECIPE / "rloo_qwen3_4b.yaml").items() if k not in ("hydra", "defaults")})
    ours = leaves(raw(OURS))
    differ = {path for path in sync.keys() & ours.keys() if sync[path] != ours[path]}
    assert differ == {
        "data.train_batch_size",  # 0: verl's rollouter feeds tasks one by one (gen_batch_size 1)
        "actor_rollout_ref.hybrid_engine",  # training and rollout on separate GPUs
        "actor_rollout_ref.rollout.multi_turn.enable",  # else verl's feed renames the rows' agent
        "actor_rollout_ref.rollout.agent.agent_loop_config_path",  # agent_loop_async.yaml
        "trainer.nnodes",  # the trainer's share; rollout.nnodes serve
        "trainer.experiment_name",
    }
    assert len(sync.keys() & ours.keys()) > 45
    assert not {p for p in sync.keys() - ours.keys() if not p.startswith("trainer.")}  # nothing of the paper lost


def test_composed_config_is_the_fully_async_papers_setting(monkeypatch):
    monkeypatch.setenv("INSANDBOX_VERL_RECIPE", str(RECIPE))
    config = compose()
    run, actor, rollout = config.async_training, config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    assert run.trigger_parameter_sync_step == 1 and run.partial_rollout is True and run.staleness_threshold == 0.5
    assert run.require_batches == 1 and actor.ppo_mini_batch_size == 8 and rollout.n == 8 == config.rollout.n
    assert actor.optim.lr == 1e-6 and actor.clip_ratio_low == 0.2 and actor.clip_ratio_high == 0.28
    assert config.algorithm.adv_estimator == "insandbox_rloo" and actor.use_kl_loss is False
    assert rollout.response_length == 65536 and rollout.prompt_length == 8192
    # verl's fully async settings, kept from its own yaml: the sampler's logprobs are the old policy's
    assert actor.use_rollout_log_probs is True and config.algorithm.rollout_correction.bypass_mode is True
    assert rollout.calculate_log_probs is True and rollout.checkpoint_engine.backend == "nccl"
    assert rollout.agent.agent_loop_config_path == str(RECIPE / "agent_loop_async.yaml")
    assert rollout.agent.default_agent_loop == AGENT_NAME


def test_verls_dataclasses_take_it():
    from verl.trainer.config import AlgoConfig
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import RolloutConfig

    config = compose()
    rollout = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    assert isinstance(rollout, RolloutConfig) and rollout.multi_turn.enable and rollout.agent.num_workers == 8
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    assert actor.use_rollout_log_probs and actor.ppo_mini_batch_size == 8
    algorithm = omega_conf_to_dataclass(config.algorithm)
    assert isinstance(algorithm, AlgoConfig) and algorithm.adv_estimator == "insandbox_rloo"
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout.checkpoint_engine)


def data_overrides(tmp_path: Path, model: Path) -> list[str]:
    task = {"id": "t", "problem_statement": "Say hi.", "ground_truth": "hi"}
    write_parquet(verl_rows([task, {**task, "id": "u"}]), tmp_path / "train.parquet")
    write_parquet(verl_rows([task], split="val"), tmp_path / "val.parquet")
    return [f"actor_rollout_ref.model.path={model}", f"data.train_files={tmp_path / 'train.parquet'}",
            f"data.val_files={tmp_path / 'val.parquet'}", "data.dataloader_num_workers=0",
            f"+data.cache_dir={tmp_path / 'cache'}", "data.filter_overlong_prompts_workers=1"]


def test_verls_rollouter_accepts_it_and_counts_100_steps(tmp_path, model):
    """verl's FullyAsyncRollouter (the class inside its Ray actor) built on the recipe: its own
    asserts pass, our parquet goes through its datasets, and its arithmetic gives the paper's 100
    steps and 12 groups in flight (8 x (1 + staleness_threshold)). Only the server count is given
    here (4: 8 GPUs at tensor parallel 2), which verl reads from servers it would start on GPUs."""
    from verl.experimental.fully_async_policy.fully_async_rollouter import FullyAsyncRollouter
    from verl.utils.tokenizer import hf_tokenizer

    config = compose(data_overrides(tmp_path, model))
    rollouter_cls = FullyAsyncRollouter.__ray_metadata__.modified_class
    rollouter = rollouter_cls(config=config, tokenizer=hf_tokenizer(str(model)), device_name="cpu")
    # rollout.total_rollout_steps (800) bounds it: the two tasks x total_epochs would allow 2000
    assert rollouter.total_rollout_steps == 800 and rollouter.required_samples == 8

    class Servers:
        def get_active_server_count(self) -> int:
            return 4

    async def sizes():
        rollouter._init_async_objects()
        rollouter.llm_server_manager = Servers()
        await rollouter.set_max_required_samples()
        return rollouter.get_total_train_steps(), rollouter.max_required_samples, rollouter.max_concurrent_samples

    assert asyncio.run(sizes()) == (100, 12, 12)  # 4 servers x 16 could take 64 groups; the bound is 12

    with pytest.raises(AssertionError, match="train_batch_size must be zero"):  # what the recipe must set
        rollouter_cls(config=compose([*data_overrides(tmp_path, model), "data.train_batch_size=8"]),
                      tokenizer=hf_tokenizer(str(model)), device_name="cpu")


@pytest.mark.parametrize("multi_turn, agent", [(True, AGENT_NAME), (False, "single_turn_agent")])
def test_verls_feed_keeps_our_agent_only_with_multi_turn_on(tmp_path, model, multi_turn, agent):
    """verl's rollouter turns each dataset row into rollout.n copies (prepare_single_generation_data);
    with multi_turn off it names verl's single-turn agent on every copy, and our loop would never run."""
    from verl.experimental.fully_async_policy.detach_utils import prepare_single_generation_data
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
    from verl.utils.tokenizer import hf_tokenizer

    config = compose([*data_overrides(tmp_path, model), f"actor_rollout_ref.rollout.multi_turn.enable={multi_turn}"])
    dataset = RLHFDataset(config.data.train_files, hf_tokenizer(str(model)), config.data)
    batch = prepare_single_generation_data(collate_fn([dataset[0]]), config)
    assert list(batch.non_tensor_batch["agent_name"]) == [agent] * 8


def test_async_agent_loop_yaml_is_the_synchronous_one_with_the_async_loop():
    from hydra.utils import get_class
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, _agent_loop_registry

    sync, ours = OmegaConf.load(RECIPE / "agent_loop.yaml"), OmegaConf.load(RECIPE / "agent_loop_async.yaml")
    assert [e.name for e in ours] == [AGENT_NAME]  # the name verl_data.py's rows carry
    entry = OmegaConf.to_container(ours[0], resolve=False)
    cls = get_class(entry.pop("_target_"))
    assert cls is InSandboxAsyncAgentLoop and issubclass(cls, InSandboxAgentLoop) and issubclass(cls, AgentLoopBase)
    assert entry.pop("max_staleness") == 4
    base = OmegaConf.to_container(sync[0], resolve=False)
    base.pop("_target_")
    assert entry == base  # the same rollout, sandbox and reward settings
    entry.pop("name")
    LoopSettings(**{**entry, "records_dir": None})
    assert _agent_loop_registry[ASYNC_AGENT_NAME] == {"_target_": f"{cls.__module__}.{cls.__qualname__}"}


def test_run_sh_train_async_refuses_without_data(tmp_path):
    script = str(RECIPE / "run.sh")
    env = {**os.environ, "INSANDBOX_VERL_DATA": str(tmp_path / "none")}
    done = subprocess.run(["bash", script, "train-async"], env=env, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "run.sh data first" in done.stderr
    done = subprocess.run(["bash", script], env=env, cwd=ROOT, capture_output=True, text=True)
    assert "train-async" in done.stderr  # listed among the steps


def test_verls_fully_async_entry_point_runs_until_it_asks_for_gpus(tmp_path, model):
    """run.sh train-async's command, verl's own fully_async_main: Hydra composes verl's config with
    ours, Ray starts, the task runner loads the tokenizer and builds the trainer, which stops where it
    reserves the trainer's GPUs. (Ray is told of 32 CPUs: verl's trainer actor asks for 10.)"""
    data = data_overrides(tmp_path, model)
    env = {**os.environ, "INSANDBOX_VERL_RECIPE": str(RECIPE), "INSANDBOX_VERL_DATA": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
           "RAY_DEDUP_LOGS": "0", "VERL_USE_EXTERNAL_MODULES": "insandbox.rl.trainers.verl_advantage"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-m", "verl.experimental.fully_async_policy.fully_async_main", "--config-dir", str(RECIPE),
         "+fully_async=rloo_qwen3_4b", data[0], "trainer.nnodes=1", "trainer.n_gpus_per_node=8", "rollout.nnodes=1",
         "rollout.n_gpus_per_node=8", "data.dataloader_num_workers=0", f"trainer.default_local_dir={tmp_path}/ckpt",
         "trainer.logger=[console]", "+ray_kwargs.ray_init.num_cpus=32"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "'staleness_threshold': 0.5" in out and "'trigger_parameter_sync_step': 1" in out  # ours, resolved
    assert f"'agent_loop_config_path': '{RECIPE / 'agent_loop_async.yaml'}'" in out
    assert "'adv_estimator': 'insandbox_rloo'" in out
    assert "[ASYNC MAIN] Starting create trainer..." in out
    assert "Total available GPUs 0 is less than total desired GPUs 8" in out, out[-3000:]


def test_every_run_sh_step_the_docs_show_is_one_run_sh_has():
    """The commands docs/rl/verl.md and the recipe's README show: each `run.sh STEP` is a step of the
    script, and each setting they prefix is one it reads."""
    import re

    script = (RECIPE / "run.sh").read_text(encoding="utf-8")
    steps = set(re.findall(r"^  ([a-z-]+)\)$", script, flags=re.M))
    assert {"setup", "data", "head", "worker", "train", "train-async"} <= steps
    shown = []
    for page in (ROOT / "docs" / "rl" / "verl.md", RECIPE / "README.md"):
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"((?:[A-Z_]+=\S+\s+)*)recipes/verl/run\.sh\s+([a-z-]+)", text):
            shown.append(match.group(2))
            for setting in re.findall(r"([A-Z_]+)=", match.group(1)):
                assert re.search(rf"\${{?{setting}\b", script), (page.name, setting)
    assert "train-async" in shown and set(shown) <= steps, set(shown) - steps
