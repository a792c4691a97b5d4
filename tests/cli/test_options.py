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


# ---------------------------------------------------------------------- one vocabulary, shown one way
def _commands() -> dict:
    """Every command as typed ('run', 'rl rollout') -> its click command."""
    found = {}

    def walk(command, path):
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, path + [name])
        if path and not getattr(command, "commands", None):
            found[" ".join(path)] = command
    walk(typer.main.get_command(app), [])
    return found


def _help(name: str, command) -> str:
    return command.get_help(command.make_context(name, [], resilient_parsing=True))


def test_metavars_are_words_in_capitals_and_defaults_are_shown_one_way():
    """Regressions: metavars showed Python types (`<list[str]>`, `<float>`), `image build --no-no-cache`, defaults
    written four ways ((default: X), [default: X], (default X), [default: no-stream])."""
    import re

    for name, command in _commands().items():
        for param in command.params:
            if not getattr(param, "is_flag", False):
                assert re.fullmatch(r"[A-Z][A-Z0-9_=.-]*", param.metavar or ""), (name, param.name, param.metavar)
        text = _help(name, command)
        for wrong in ("<str>", "<int>", "<float>", "<path>", "list[", "--no-no-", "(default", "default:  ",
                      "[default: no-", "[default: (", ".0]"):
            assert wrong not in text, (name, wrong)
    run = " ".join(_help("run", _commands()["run"]).split())
    assert "--stream / --no-stream" in run and "[default: off]" in run and "[default: 120]" in run
    assert "[default: the server's]" in run


def test_one_name_means_one_thing_in_every_command():
    """An option name takes a value in every command or in none (regression: `--json` a flag in run, a path in
    replay); the names the issue found with two meanings are gone from where they meant the other thing."""
    takes_value: dict[str, set] = {}
    for command in _commands().values():
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--"):
                    takes_value.setdefault(opt, set()).add(not param.is_flag)
    assert {opt for opt, kinds in takes_value.items() if len(kinds) > 1} == set()
    options = {name: {o for p in c.params for o in getattr(p, "opts", [])} for name, c in _commands().items()}
    assert all("--output-dir" not in opts for opts in options.values())
    assert "--pool" not in options["report"] and "--merge" in options["report"]
    assert {"--model", "--max-turns", "--max-tokens-per-turn", "--timeout", "--open", "--n"} & options["rl rollout"] \
        == set()
    assert "--max-steps" not in options["rl train"] and "--train-steps" in options["rl train"]
    assert "--tag" not in options["image build"] | options["image status"]


RENAMED_ARGS = {"run": ["x"], "fork": ["run", "--step", "1"], "replay": ["run"], "report": ["run"],
                "rl rollout": ["--data", "d", "--out", "o"], "rl build-data": ["--sources", "s", "--out", "o"]}


@pytest.mark.parametrize("command, old, new", [(c, o, n) for c, o, n, _ in __import__(
    "insandbox.cli.renamed", fromlist=["table"]).table()])
def test_an_old_name_still_works_with_a_note_and_is_not_in_help(command, old, new, capsys):
    from insandbox.cli.renamed import GONE_IN, RENAMED

    cmd = _commands()[command]
    new_name = RENAMED[command][old][0]
    param = next((p for p in cmd.params if new_name in getattr(p, "opts", [])), None)
    value = [] if param is None or param.is_flag else ["7"]
    ctx = cmd.make_context(command, [*RENAMED_ARGS.get(command, []), old, *value])
    err = capsys.readouterr().err
    if new_name is None:
        assert err == f"insandbox: {old} is the default; leave it out (it goes in {GONE_IN})\n"
    else:
        assert err == f"insandbox: {old} is now {new_name} (the old name goes in {GONE_IN})\n"
        given = ctx.params[param.name]
        assert given is True if param.is_flag else str(given) in ("7", "7.0"), (param.name, given)
    assert old not in {o for p in cmd.params for o in getattr(p, "opts", []) + getattr(p, "secondary_opts", [])}


def test_a_value_that_looks_like_an_old_name_is_left_alone():
    cmd = _commands()["run"]
    ctx = cmd.make_context("run", ["--query-file", "--output-dir", "--out", "d"])
    assert str(ctx.params["query_file"]) == "--output-dir" and str(ctx.params["out"]) == "d"


def test_the_renamed_options_page_lists_every_renamed_option():
    from insandbox.cli.renamed import markdown
    from tests.helpers import REPO

    assert (REPO / "docs/reference/renamed-options.md").read_text() == markdown()


# ---------------------------------------------------------------------- settings declared once
def _defaults(command: str) -> dict:
    return {p.name: p.default for p in _commands()[command].params}


def test_rl_rollout_defaults_are_rollout_configs_and_it_takes_every_sandbox_option():
    """Regression: `rl rollout` ran 8 turns / 4,096 / 512 tokens where RolloutConfig ran 16 / 8,192 / 2,048, and
    had no --memory, --cpus, --disk or --max-sandboxes."""
    from insandbox.cli.options import LIMITS, SANDBOX
    from insandbox.cli.rl_rollout import rollout_config
    from insandbox.rl.rollout.runner import RolloutConfig

    given = _defaults("rl rollout")
    assert set(SANDBOX) | set(LIMITS) <= set(given)
    assert {"memory", "cpus", "disk", "max_sandboxes", "pids_limit", "env", "cap_add"} <= set(given)
    sampling = {name: given[name] for name in ("max_response_tokens", "max_tokens", "temperature", "top_p")}
    assert rollout_config({name: given[name] for name in (*LIMITS, *SANDBOX)}, **sampling) == RolloutConfig()
    cfg = RolloutConfig()
    assert (cfg.max_steps, cfg.max_response_tokens, cfg.max_tokens, cfg.time_limit) == (16, 8192, 2048, 900)
    custom = rollout_config({name: given[name] for name in (*LIMITS, *SANDBOX)} | {"memory": "1g", "cpus": 0,
                                                                                   "max_sandboxes": 3}, **sampling)
    assert (custom.memory, custom.cpus, custom.max_sandboxes) == ("1g", None, 3)


def test_rollout_config_is_made_of_the_sections_and_reads_the_old_names():
    from insandbox.config import SandboxSettings, TaskLimits
    from insandbox.rl.rollout.runner import RolloutConfig

    assert set(SandboxSettings.model_fields) | set(TaskLimits.model_fields) <= set(RolloutConfig.model_fields)
    with pytest.raises(ValueError, match="max_steps"):
        RolloutConfig(max_steps=0)  # the section's own check
    with pytest.warns(DeprecationWarning, match="max_turns is now max_steps"):
        old = RolloutConfig(max_turns=3, max_tokens_per_turn=64, timeout_s=30)
    assert (old.max_steps, old.max_tokens, old.time_limit) == (3, 64, 30)
    assert (old.max_turns, old.max_tokens_per_turn, old.timeout_s) == (3, 64, 30)


def test_bench_defaults_are_declared_once():
    """Regression: concurrency, retries, max uses and the waits were each written in about three places."""
    from insandbox.bench.runner import BenchConfig
    from insandbox.bench.sample import SampleRunner
    from insandbox.core import defaults
    from insandbox.runs.session import PoolSettings
    from insandbox.sandbox.pool import SandboxPool

    api = BenchConfig(task="math")
    given = _defaults("bench")
    assert (given["retries"], given["max_uses"], given["pool"], given["recycle"]) == \
        (api.retries, api.max_uses, api.pool, api.recycle)
    assert given["concurrency"] is None and api.concurrency == defaults.CONCURRENCY  # None: BenchConfig's own
    assert "[default: 8; with --resume: the run's own]" in " ".join(_help("bench", _commands()["bench"]).split())
    runner = inspect.signature(SampleRunner).parameters
    assert (runner["retries"].default, runner["retry_backoff_s"].default) == (api.retries, api.retry_backoff_s)
    assert (PoolSettings(size=1).max_uses, PoolSettings(size=1).close_wait_s) == (api.max_uses, api.engine_wait_s)
    pool = inspect.signature(SandboxPool).parameters
    assert pool["max_uses"].default == api.max_uses


def test_the_environment_of_a_run_is_the_sections_defaults():
    """EnvConfig sits below config/ in the layers (agent cannot import it), so its fields are its own; their
    defaults come from core/defaults.py, and this pins them to the sections'."""
    from insandbox.agent.env import EnvConfig
    from insandbox.prompts import load_prompt_config

    prompts = load_prompt_config()
    assert EnvConfig(prompts=prompts) == RunConfig().env_config(prompts)
