"""RunConfig as four sections: each field declared once, each section a frozen view, and one place
that turns each into what the layer below takes."""
from __future__ import annotations

import inspect

import pytest
from pydantic import ValidationError

from insandbox.config import CopyBack, ModelSettings, RunConfig, SandboxSettings, TaskLimits, validated
from insandbox.core import defaults
from insandbox.core.units import format_size, parse_size
from insandbox.prompts import load_prompt_config
from insandbox.sandbox import CopyLimits, SandboxLimits

SECTIONS = (ModelSettings, TaskLimits, SandboxSettings, CopyBack)
RUN_ONLY = {"mode", "prompt_config", "input_dir", "output_dir", "runs_root"}


def test_every_field_belongs_to_one_section_or_to_the_run_alone():
    names = [n for s in SECTIONS for n in s.model_fields]
    assert len(names) == len(set(names))
    assert set(RunConfig.model_fields) == set(names) | RUN_ONLY
    # the flat fields keep their checks and defaults: the section's own
    for section in SECTIONS:
        for name, info in section.model_fields.items():
            assert RunConfig.model_fields[name].default == info.default, name


def test_sections_are_frozen_views_of_the_flat_fields():
    cfg = RunConfig(model="m", memory="1g", max_steps=7, output_max_files=3)
    assert cfg.model_settings.model == "m" and cfg.sandbox.memory == "1g"
    assert cfg.limits == TaskLimits(max_steps=7) and cfg.copy_back == CopyBack(output_max_files=3)
    with pytest.raises(ValidationError):
        cfg.sandbox.memory = "2g"
    cfg.max_steps = 9  # RunConfig itself stays assignable (replay does it); the next view sees it
    assert cfg.limits.max_steps == 9


def test_a_section_checks_what_run_checks():
    with pytest.raises(ValidationError, match="is not a size"):
        SandboxSettings(memory="lots")
    with pytest.raises(ValidationError, match="is not a network"):
        SandboxSettings(network="a b")
    assert SandboxSettings(cap_add=["cap_sys_ptrace"]).cap_add == ["SYS_PTRACE"]
    with pytest.raises(ValidationError):
        SandboxSettings(image="insandbox:latest", extra=1)


def test_the_environment_of_an_episode_is_built_from_the_sections():
    cfg = validated({"image": "ex:1", "memory": "512m", "cpus": 1.5, "pids_limit": 64, "network": "none",
                     "disk": "1g", "runtime": "runc", "cap_add": ["NET_RAW"], "env": {"A": "1"},
                     "timeout_per_command": 9, "output_limit": 300, "max_steps": 3, "token_budget": 50,
                     "time_limit": 8, "stuck_after": None, "output_max_file_bytes": 10, "output_max_bytes": 20,
                     "output_max_files": 2, "backend": "docker"})
    env = cfg.env_config(load_prompt_config(), "r1")
    assert env.limits == SandboxLimits("512m", 1.5, 64, "none", "1g", "runc", ("NET_RAW",))
    assert (env.image, env.env_vars, env.command_timeout, env.output_limit_chars, env.backend, env.run_id) == (
        "ex:1", {"A": "1"}, 9, 300, "docker", "r1")
    assert (env.max_steps, env.token_budget, env.time_limit, env.stuck_after) == (3, 50, 8, None)
    assert env.copy_limits == CopyLimits(10, 20, 2)
    spec = cfg.sandbox_spec("r2")
    assert (spec.image, spec.limits, spec.env, spec.run_id, spec.output_limit_chars) == (
        "ex:1", env.limits, {"A": "1"}, "r2", 300)


def test_sizes_are_read_once_into_bytes_where_the_limits_are_made():
    limits = RunConfig(memory="1.5g", disk=None).sandbox_limits()
    assert (limits.memory, limits.memory_bytes, limits.disk_bytes) == ("1.5g", 3 * 1024 ** 3 // 2, None)
    assert SandboxLimits().disk_bytes == parse_size(defaults.DISK)
    for n in (None, 0, 1000, 3 * 1024, 512 * 1024 ** 2, 1024 ** 3, 5 * 1024 ** 4):
        assert format_size(n) == "none" if n is None else parse_size(format_size(n)) == n


def test_the_client_settings_are_what_every_client_takes():
    from insandbox.models.anthropic_messages import AnthropicClient
    from insandbox.models.openai_compat import OpenAIChatClient

    kwargs = ModelSettings(temperature=0.5, request_timeout=7).client_kwargs()
    assert kwargs["temperature"] == 0.5 and kwargs["timeout"] == 7
    assert set(kwargs) <= set(inspect.signature(OpenAIChatClient).parameters)
    # Anthropic's client sends thinking back always and has no logprobs (runs/session.py drops them)
    assert set(kwargs) - {"send_reasoning", "logprobs", "top_logprobs"} <= set(
        inspect.signature(AnthropicClient).parameters)
    # and the clients' own defaults are the settings' defaults
    for name, param in inspect.signature(OpenAIChatClient).parameters.items():
        field = {"timeout": "request_timeout"}.get(name, name)
        if name in kwargs:
            assert param.default == ModelSettings.model_fields[field].default, name
