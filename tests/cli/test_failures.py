"""Mistakes a newcomer makes, each said in one line on stderr with the right exit status, by the real
`insandbox` command. The early ones are found before anything is made: the Docker engine is pointed at a
socket that does not exist (a sandbox started, or even the engine asked, would say "cannot reach the
Docker engine" instead), and no run folder appears."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import cli
from tests.servers import free_port

NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
NO_KEYS = {"INSANDBOX_API_KEY": "", "OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "", "INSANDBOX_MODEL": "",
           "INSANDBOX_BASE_URL": ""}


def one_line(r: subprocess.CompletedProcess, code: int) -> str:
    """The one line on stderr of a command that exited `code`, with no traceback."""
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code and len(lines) == 1 and lines[0].startswith("insandbox: "), (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    return lines[0]


def made_nothing(folder: Path) -> bool:
    """The test's working folder holds nothing but what the test put there: no run folder, no runs/."""
    return not (folder / "runs").exists() and not (folder / "out").exists()


def test_a_task_yaml_with_a_syntax_error_is_one_line_with_its_line(tmp_path):
    """Regression: 246 lines of traceback (yaml.scanner's)."""
    task = tmp_path / "task.yaml"
    task.write_text("name: mine\nscorer: exact\nsystem_prompt: [unclosed\ninstance_prompt: x\n")
    r = cli("bench", str(task), "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "out"),
            env=NO_ENGINE, cwd=tmp_path)
    line = one_line(r, 2)
    assert f"task {task} line 4, column 16: not valid YAML" in line, line
    assert made_nothing(tmp_path)
    # a key of the wrong kind is one line too (pydantic's errors, one per key)
    task.write_text("name: mine\nscorer: exact\nrepeats: many\nsystem_prompt: s\ninstance_prompt: i\n")
    line = one_line(cli("bench", str(task), "--out", str(tmp_path / "out"), env=NO_ENGINE, cwd=tmp_path), 2)
    assert f"task {task}: repeats: " in line and "integer" in line, line


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder nobody may write to, root included: a read-only mount as root, a folder without write
    permission otherwise."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() == 0:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], check=True)
    else:
        folder.chmod(0o555)
    yield folder
    if os.geteuid() == 0:
        subprocess.run(["umount", str(folder)], check=True)
    else:
        folder.chmod(0o755)


def test_run_and_bench_from_a_read_only_folder_say_so_before_anything_starts(read_only_folder, scripted):
    """Regression: `insandbox run` from a read-only folder printed 129 lines (OSError: Read-only file system:
    'runs'), after the model client and the sandbox backend were made ready."""
    srv = scripted({"turns": [{"tool": "submit"}]})
    model = ["--model", "m", "--base-url", srv.url]
    line = one_line(cli("run", "x", *model, env=NO_ENGINE, cwd=read_only_folder), 2)
    assert line == (f"insandbox: cannot write the run folder runs: {read_only_folder} is a read-only file system "
                    "(give --out DIR on a writable disk, or run from a writable folder)") or \
        f"{read_only_folder} is not writable by this user" in line, line
    rows = read_only_folder.parent / "rows.jsonl"
    rows.write_text(json.dumps({"id": "a", "problem_statement": "x", "ground_truth": "y"}) + "\n")
    line = one_line(cli("bench", "math", "--data", str(rows), *model, env=NO_ENGINE, cwd=read_only_folder), 2)
    assert "cannot write the run folder runs/bench-math-" in line and str(read_only_folder) in line, line
    assert srv.requests == []  # not even the model was asked


def test_no_api_key_for_a_hosted_api_is_one_line_naming_its_url(tmp_path):
    """Regression: 15-19 s of retries, a sandbox and a run folder, then "cannot reach the model server at
    None" (no --base-url given: the SDK's own URL, never named)."""
    cases = {("--model", "anthropic/claude-sonnet-4-5"): "https://api.anthropic.com: give --api-key, "
                                                         "INSANDBOX_API_KEY or ANTHROPIC_API_KEY",
             ("--model", "gpt-4o"): "https://api.openai.com/v1: give --api-key, INSANDBOX_API_KEY or OPENAI_API_KEY"}
    for args, said in cases.items():
        line = one_line(cli("run", "x", *args, env={**NO_ENGINE, **NO_KEYS}, cwd=tmp_path), 2)
        assert line == f"insandbox: no API key for the model server at {said}", line
    assert made_nothing(tmp_path)


def test_an_unreachable_endpoint_is_one_line_before_any_sandbox_or_folder(tmp_path):
    """Regression: six connection attempts over 14 s, a started sandbox and a run folder recording
    `model_error`; a host that does not resolve was "connection refused x6"."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    line = one_line(cli("run", "x", "--model", "m", "--base-url", url, env=NO_ENGINE, cwd=tmp_path), 1)
    assert line.startswith(f"insandbox: cannot reach the model server at {url}: connection refused"), line
    line = one_line(cli("run", "x", "--base-url", url, env=NO_ENGINE, cwd=tmp_path), 1)  # no --model: the same
    assert f"cannot reach the model server at {url}" in line
    dns = "http://no-such-host.invalid/v1"  # .invalid never resolves (RFC 6761)
    line = one_line(cli("run", "x", "--model", "m", "--base-url", dns, env=NO_ENGINE, cwd=tmp_path), 1)
    assert line == (f"insandbox: cannot reach the model server at {dns}: its host name 'no-such-host.invalid' does "
                    "not resolve (DNS lookup failed: check --base-url)"), line
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "a", "problem_statement": "x", "ground_truth": "y"}) + "\n")
    line = one_line(cli("bench", "math", "--data", str(rows), "--model", "m", "--base-url", url, env=NO_ENGINE,
                        cwd=tmp_path), 1)
    assert f"cannot reach the model server at {url}" in line
    assert made_nothing(tmp_path)


def test_a_refused_key_and_a_model_the_server_does_not_serve_are_one_line(scripted, tmp_path):
    srv = scripted({"name": "Qwen/Qwen3-8B", "owned_by": "vllm", "api_key": "sk-right", "turns": [{"tool": "submit"}]})
    base = ["--base-url", srv.url, "--mode", "llm"]
    line = one_line(cli("run", "x", "--model", "Qwen/Qwen3-8B", *base, "--api-key", "sk-wrong", env=NO_ENGINE,
                        cwd=tmp_path), 2)
    assert line == (f"insandbox: the model server at {srv.url} answered 401: the API key was refused (give "
                    "--api-key, INSANDBOX_API_KEY or OPENAI_API_KEY)"), line
    line = one_line(cli("run", "x", "--model", "qwen3", *base, "--api-key", "sk-right", env=NO_ENGINE,
                        cwd=tmp_path), 2)
    assert line == (f"insandbox: --model qwen3: the model server at {srv.url} does not serve it (it serves: "
                    "Qwen/Qwen3-8B)"), line
    assert made_nothing(tmp_path) and srv.requests == []  # no chat request was made
    # a server that answers names it does not list (llama.cpp's, insandbox's own) is not second-guessed
    lenient = scripted({"name": "listed", "llm_turns": [{"content": "ok"}]})
    r = cli("run", "x", "--model", "unlisted", "--base-url", lenient.url, "--mode", "llm", "--out",
            str(tmp_path / "out"), "-q", env=NO_ENGINE)
    assert r.returncode == 0, r.stderr


def test_ctrl_c_in_a_bench_names_the_folder_to_resume(scripted, tmp_path):
    """Regression: an interrupted benchmark said nothing of how to finish it."""
    srv = scripted({"latency": 60, "llm_turns": [{"content": "y"}]})
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": i, "problem_statement": "x", "ground_truth": "y"}) + "\n"
                            for i in "ab"))
    exe = Path(sys.executable).parent / "insandbox"
    proc = subprocess.Popen([str(exe), "bench", "math", "--data", str(rows), "--mode", "llm", "--model", "m",
                             "--base-url", srv.url, "-q"], cwd=tmp_path, env={**os.environ, **NO_ENGINE},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not srv.requests and time.time() < deadline:  # a sample is waiting on the model
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, err
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert err.strip().splitlines()[-1] == (f"insandbox: interrupted: the samples recorded so far are kept in "
                                            f"{run_dir.relative_to(tmp_path)}; finish the run with: insandbox bench "
                                            f"--resume {run_dir.relative_to(tmp_path)}"), err


def test_an_interrupted_run_says_interrupted_once(scripted, tmp_path):
    """Regression: the summary read "interrupted (interrupted (Ctrl-C or SIGTERM))"."""
    srv = scripted({"latency": 60, "llm_turns": [{"content": "y"}]})
    exe = Path(sys.executable).parent / "insandbox"
    proc = subprocess.Popen([str(exe), "run", "x", "--mode", "llm", "--model", "m", "--base-url", srv.url, "--out",
                             str(tmp_path / "run")], env={**os.environ, **NO_ENGINE},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not srv.requests and time.time() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    t = json.loads((tmp_path / "run" / "trajectory.json").read_text())
    assert (t["exit_reason"], t["exit_detail"]) == ("interrupted", "Ctrl-C or SIGTERM")
    shown = " ".join((out + err).split())  # the summary table, on stdout
    assert "interrupted (Ctrl-C or SIGTERM)" in shown and "interrupted (interrupted" not in shown, shown
