"""The training config: presets, merging, paths, and errors as one line (no Docker, no model)."""
from __future__ import annotations

from pathlib import Path

import pytest

from insandbox.rl.trainers.config import PRESETS, ConfigError, TrainConfig, load_config, preset_names


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_presets_ship_and_validate():
    assert {"smoke", "paper"} <= set(preset_names())
    for name in preset_names():
        config = load_config(None, {"preset": name})
        assert config.preset == name
    smoke = load_config(None, {"preset": "smoke"})
    assert smoke.model == "embedded" and smoke.is_gguf()
    assert smoke.data == str(PRESETS / "smoke-tasks.jsonl") and Path(smoke.data).is_file()
    from insandbox.rl.trainers.trl_train import read_rows

    assert len(read_rows(smoke)) == 4  # the shipped rows are valid task rows
    assert smoke.rollout.prompt_config == PRESETS / "smoke-prompts.yaml"
    assert smoke.rollout.prompts().system_prompt  # the compact prompt config loads


def test_a_file_overrides_its_preset_key_by_key_and_the_command_line_overrides_the_file(tmp_path):
    config = write(tmp_path / "train.yaml", "preset: smoke\ndata: rows.jsonl\nout: run\n"
                                            "grpo: {learning_rate: 3.0e-6}\nrollout: {max_turns: 5}\n"
                                            "reward: {no_answer_penalty: -1.0}\n")
    c = load_config(config)
    assert c.grpo.learning_rate == 3e-6 and c.grpo.num_generations == 8  # the rest of grpo: from the preset
    assert c.rollout.max_turns == 5 and c.rollout.max_tokens_per_turn == 48
    assert c.reward_config().no_answer_penalty == -1.0 and c.reward_config().max_steps_penalty == -0.25
    assert c.data == str(tmp_path / "rows.jsonl") and c.out == tmp_path / "run"  # relative to the file
    c = load_config(config, {"out": "elsewhere", "grpo": {"max_steps": 7}}, cwd=tmp_path / "cwd")
    assert c.out == tmp_path / "cwd" / "elsewhere" and c.grpo.max_steps == 7 and c.grpo.learning_rate == 3e-6


def test_model_paths_are_resolved_but_hub_names_are_kept(tmp_path):
    (tmp_path / "ckpt").mkdir()
    config = write(tmp_path / "a.yaml", "model: ckpt\n")
    assert load_config(config).model == str(tmp_path / "ckpt")
    config = write(tmp_path / "b.yaml", "model: weights/m.gguf\n")
    assert load_config(config).model == str(tmp_path / "weights/m.gguf")
    config = write(tmp_path / "c.yaml", "model: Qwen/Qwen3-4B-Instruct-2507\n")
    assert load_config(config).model == "Qwen/Qwen3-4B-Instruct-2507"


@pytest.mark.parametrize("text, message", [
    ("grpo: {learning_rat: 1.0e-6}\n", "grpo.learning_rat: unknown setting"),
    ("rollout: {max_turn: 3}\n", "rollout.max_turn: unknown setting"),
    ("reward: {no_answer: -1}\n", "reward.no_answer: unknown setting"),
    ("epochs: 3\n", "epochs: unknown setting"),
    ("grpo: {num_generations: 1}\n", "grpo.num_generations: Input should be greater than or equal to 2"),
    ("grpo: {prompts_per_step: 3, num_generations: 2, micro_batch: 4}\n", "must split into mini_batches"),
    ("grpo: {advantage: rloo, scale_rewards: group}\n", "advantage rloo needs scale_rewards none"),
    ("rollout: {temperature: 0}\n", "rollout.temperature must be above 0"),
    ("grpo: {trl: {no_such_field: 1}}\n", "grpo.trl: no_such_field: not GRPOConfig fields"),
    ("grpo: {trl: {beta: 0.1}}\n", "grpo.trl: beta: set by the config itself"),
    ("preset: nope\n", "preset 'nope': no such preset"),
    ("grpo: [1, 2]\n", "grpo: Input should be a valid dictionary"),
    ("- just\n- a list\n", "expected a mapping of settings, got list"),
    ("grpo: {learning_rate: 1e-6\n", "not valid YAML (line 2"),
])
def test_bad_configs_are_one_line_errors(tmp_path, text, message):
    config = write(tmp_path / "bad.yaml", text)
    with pytest.raises(ConfigError) as e:
        load_config(config)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_extra_grpo_config_fields_pass_through(tmp_path):
    config = write(tmp_path / "t.yaml", "grpo: {trl: {top_entropy_quantile: 0.2, logging_first_step: true}}\n")
    assert load_config(config).grpo.trl == {"top_entropy_quantile": 0.2, "logging_first_step": True}


def test_defaults_are_the_papers_algorithm():
    g = TrainConfig().grpo
    assert (g.num_generations, g.prompts_per_step, g.beta, g.epsilon_high, g.learning_rate, g.scale_rewards,
            g.advantage, g.max_steps) == (8, 8, 0.0, 0.28, 1e-6, "none", "rloo", 100)


def test_reward_paper_is_a_shorthand_that_merges_over_the_preset(tmp_path):
    """`reward: paper` picks the official reward (issue 22) and keeps the preset's penalties."""
    path = tmp_path / "train.yaml"
    path.write_text("preset: smoke\nreward: paper\n")
    config = load_config(path)
    assert config.reward.scoring == "paper" and config.reward.no_answer_penalty == -0.25
    assert config.reward_config().scoring == "paper"
    assert load_config(None, {"preset": "smoke"}).reward.scoring == "strict"  # the default
    assert TrainConfig(reward="paper").reward.scoring == "paper"
    path.write_text("reward: generous\n")
    with pytest.raises(ConfigError, match="no scoring"):
        load_config(path)


def test_async_rollouts_default_to_synchronous_and_bound_staleness_in_optimizer_steps():
    from insandbox.core.errors import ConfigError

    c = TrainConfig()
    assert c.grpo.async_steps == 0 and c.max_staleness() == 0 and c.steps_per_batch() == 1
    c = load_config(None, {"preset": "smoke", "grpo": {"async_steps": 2, "mini_batches": 2}})
    assert c.steps_per_batch() == 2 and c.max_staleness() == 4  # k batches of 2 updates each
    c = load_config(None, {"preset": "smoke", "grpo": {"async_steps": 1, "max_staleness": 0}})
    assert c.max_staleness() == 0
    with pytest.raises(ConfigError, match="grpo.async_steps: Input should be greater than or equal to 0"):
        load_config(None, {"preset": "smoke", "grpo": {"async_steps": -1}})
