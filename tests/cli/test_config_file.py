"""`-c FILE.yaml` (cli/config_file.py): option values from a file in RunConfig's sections, the command line
overriding it; its mistakes in one line with their line."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main

from insandbox.cli.app import app
from tests.helpers import REPO, cli


def _command(name: str):
    command = typer.main.get_command(app)
    for word in name.split():
        command = command.commands[word]
    return command


def _params(name: str, *args: str) -> dict:
    """The values the command would be called with (nothing runs)."""
    return _command(name).make_context(name, list(args)).params


def _example(tmp_path: Path) -> Path:
    """The example of docs/configuration.md, as a file."""
    text = (REPO / "docs/configuration.md").read_text()
    (block,) = re.findall(r"```yaml\n# qwen.yaml\n(.*?)```", text, re.S)
    path = tmp_path / "qwen.yaml"
    path.write_text(block)
    return path


def test_the_documented_example_loads_in_run_bench_and_rl_rollout(tmp_path):
    example = _example(tmp_path)
    run = _params("run", "x", "-c", str(example))
    assert (run["base_url"], run["model"], run["temperature"], run["max_tokens"]) == \
        ("http://localhost:8000/v1", "Qwen/Qwen3-8B", 0.7, 4096)
    assert (run["max_steps"], run["time_limit"], run["memory"], run["cpus"], run["network"]) == \
        (50, 1200, "8g", 4, "registries")
    assert run["env"] == ["PIP_INDEX_URL=https://pypi.org/simple"] and run["max_output_size"] == "2g"
    assert run["mode"] == "sandbox" and run["extra_body"] == '{"chat_template_kwargs": {"enable_thinking": false}}'
    bench = _params("bench", "math", "--config", str(example))
    assert (bench["concurrency"], bench["retries"], bench["memory"], bench["model"]) == (16, 1, "8g", "Qwen/Qwen3-8B")
    rollout = _params("rl rollout", "--data", "rows.jsonl", "--out", "o", "-c", str(example))
    assert (rollout["repeats"], rollout["max_tokens"], rollout["max_steps"], rollout["memory"]) == (4, 1024, 50, "8g")
    assert "model" not in rollout  # rl rollout's policy is a local model: it has no model: section to read


def test_the_command_line_overrides_the_file_and_paths_are_the_files(tmp_path):
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "c.yaml"
    path.write_text("model:\n  temperature: 0.7\n  extra_body: {top_k: 20}\nlimits:\n  max_steps: 50\nrun:\n"
                    "  input_dir: inputs\nsandbox:\n  cap_add: SYS_PTRACE\n")
    given = _params("run", "x", "-c", str(path), "--temperature", "0.2", "--input-dir", "here")
    assert given["temperature"] == 0.2 and given["max_steps"] == 50
    assert given["input_dir"] == Path("here")  # given on the line: as given
    assert _params("run", "x", "-c", str(path))["input_dir"] == tmp_path / "conf" / "inputs"
    assert given["cap_add"] == ["SYS_PTRACE"]  # one value for a repeatable option
    assert given["extra_body"] == '{"top_k": 20}'  # a mapping for a JSON option


@pytest.mark.parametrize("text, said", [
    ("model:\n  temperature: 0.7\nsandbox:\n  memory: 8g\n  memroy: 9g\n",
     " line 5: unknown key sandbox.memroy (sandbox takes: allow_hosts, backend, cap_add, cpus, disk, env, image, "
     "max_sandboxes, memory, network, output_limit, pids_limit, pool_url, runtime, timeout_per_command)"),
    ("sandbx:\n  memory: 8g\n",
     " line 1: unknown section 'sandbx' (the sections: model, limits, sandbox, copy_back, run, bench, rollout)"),
    ("limits:\n  max_steps: [50\n", " line 3, column 1: not valid YAML: expected ',' or ']', but got '<stream end>'"),
    ("limits:\n  max_steps: many\n", " line 2: limits.max_steps: Invalid value for '--max-steps': "),
    ("- memory\n", ": a mapping of sections (model:, limits:, sandbox:, ...), not a list"),
    ("sandbox: 8g\n", " line 1: sandbox holds settings (key: value), not a str"),
])
def test_a_bad_file_is_one_line_naming_the_key_and_its_line(tmp_path, text, said):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    r = cli("run", "x", "-c", str(path), "--out", str(tmp_path / "run"), env={"DOCKER_HOST": "unix:///nonexistent"})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith(f"insandbox: --config {path}{said}"), lines[0]
    assert not (tmp_path / "run").exists()


def test_a_file_that_cannot_be_read_is_one_line(tmp_path):
    r = cli("run", "x", "-c", str(tmp_path / "none.yaml"))
    assert r.returncode == 2 and r.stderr.strip() == f"insandbox: --config {tmp_path / 'none.yaml'}: No such file or " \
                                                     "directory", r.stderr


def test_a_whole_run_from_a_config_file(scripted, tmp_path):
    srv = scripted({"name": "served", "llm_turns": [{"content": "Answer: 42"}]})
    path = tmp_path / "c.yaml"
    path.write_text(f"model:\n  base_url: {srv.url}\n  model: served\n  temperature: 0.3\nrun:\n  mode: llm\n"
                    "bench:\n  concurrency: 3\n")
    r = cli("run", "x", "-c", str(path), "--out", str(tmp_path / "run"), "-q", "--max-tokens", "9")
    assert r.returncode == 0, r.stderr
    params = srv.requests[0]["params"]
    assert (params["model"], params["temperature"], params["max_tokens"]) == ("served", 0.3, 9)
