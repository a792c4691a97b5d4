"""The option table (cli/options.py): each shared option declared once, its defaults those of the
settings, and its values turned into RunConfig fields by the table alone."""
from __future__ import annotations

import inspect

import pytest
import typer.main

from insandbox.cli.app import app
from insandbox.cli.common import BadArgument
from insandbox.cli.options import FORK_MODEL, GRANTS, OPTIONS, RUN, run_settings, sandbox_given, settings
from insandbox.config import RunConfig, validated


def _params(command: str) -> dict:
    return {p.name: p for p in typer.main.get_command(app).commands[command].params}


def test_run_and_bench_defaults_are_the_settings_defaults():
    assert validated(run_settings({name: OPTIONS[name].default for name in RUN})) == RunConfig()
    for command in ("run", "bench"):
        params = _params(command)
        assert all(params[name].default == OPTIONS[name].default for name in RUN), command


def test_each_option_names_a_setting_and_replay_and_fork_default_to_as_recorded():
    assert {OPTIONS[name].field for name in OPTIONS} <= set(RunConfig.model_fields)
    assert set(GRANTS) | set(FORK_MODEL) <= set(OPTIONS)
    for command, names in (("replay", GRANTS), ("fork", GRANTS + FORK_MODEL)):
        params = _params(command)
        assert all(params[name].default is None for name in names), command


def test_values_become_fields_by_the_table():
    given = {name: None for name in RUN} | {
        "memory": "none", "disk": "2g", "cpus": 0, "stuck_after": 0, "tool_choice": "omit", "cap_add": ["net_raw"],
        "env": ["A=1", "B=x=y"], "extra_body": '{"k": 1}', "max_output_file_size": "1m", "max_output_size": "none",
        "max_output_files": 0, "runtime": ""}
    assert settings(given) == {
        "memory": None, "disk": "2g", "cpus": None, "stuck_after": None, "tool_choice": None, "cap_add": ["net_raw"],
        "env": {"A": "1", "B": "x=y"}, "extra_body": {"k": 1}, "output_max_file_bytes": 1024 ** 2,
        "output_max_bytes": None, "output_max_files": None, "runtime": None}
    # replay and fork: only what was given, checked and normalised as run checks it
    assert sandbox_given({name: None for name in GRANTS} | {"cap_add": ["cap_net_raw"], "memory": "0"}) == {
        "cap_add": ["NET_RAW"], "memory": None}


@pytest.mark.parametrize("name, value, message", [
    ("provider", "x", "--provider x: use openai or anthropic"),
    ("tool_format", "x", "--tool-format x: use native or text"),
    ("extra_body", "[1]", "--extra-body must be a JSON object"),
    ("env", ["A"], "--env wants KEY=VALUE, got 'A'"),
    ("max_output_size", "lots", "--max-output-size: 'lots' is not a size"),
])
def test_a_bad_value_is_one_line_naming_its_option(name, value, message):
    with pytest.raises(BadArgument, match=message.replace("[", r"\[")):
        settings({name: value})


def test_commands_see_their_own_parameters_and_the_shared_ones_in_one_dict():
    from insandbox.cli.run import run

    signature = inspect.signature(run)
    assert "shared" not in signature.parameters
    assert list(signature.parameters)[-len(RUN):] == list(RUN)
