"""The `insandbox` command: flags, environment variables, exit codes, signals, clean."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, cli, containers_with_label, owner_of

SCRIPT = {"turns": [{"tool": "execute_bash", "args": {"command": "mkdir -p /testbed/output/deep/er && "
                                                                 "echo report > /testbed/output/deep/er/r.md"}},
                    {"tool": "execute_bash", "args": {"command": "echo 42 > /testbed/answer.txt"}},
                    {"tool": "submit"}]}


def test_run_with_environment_variables_and_json(scripted, tmp_path, docker_image):
    srv = scripted(SCRIPT)
    env = {"INSANDBOX_MODEL": "scripted", "INSANDBOX_BASE_URL": srv.url, "OPENAI_API_KEY": "sk-from-env"}
    r = cli("run", "Answer 42", "--out", str(tmp_path / "run"), "--image", docker_image, "--json",
            "--max-steps", "5", "--temperature", "0.5", "--max-tokens", "100", "--timeout-per-command", "30",
            "--extra-body", '{"top_k": 20}', env=env)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["exit_reason"] == "submitted" and summary["answer"] == "42\n"
    assert summary["files"] == ["deep/er/r.md"]
    assert (tmp_path / "run/files/deep/er/r.md").read_text() == "report\n"
    params = srv.requests[0]["params"]
    assert params["model"] == "scripted" and params["temperature"] == 0.5 and params["max_tokens"] == 100
    assert params["top_k"] == 20
    assert "step 1/5" in r.stderr and "exit reason" in r.stderr  # the live view, on stderr with --json


def test_model_name_comes_from_the_server_when_not_given(scripted, tmp_path, docker_image):
    srv = scripted({"name": "served-model", **SCRIPT})
    r = cli("run", "x", "--base-url", srv.url, "--out", str(tmp_path), "--image", docker_image, "-q")
    assert r.returncode == 0, r.stderr
    assert srv.requests[0]["params"]["model"] == "served-model"


def test_bad_input_gets_a_clear_error(scripted, tmp_path):
    r = cli("run", "x", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--extra-body", "{nope")
    assert r.returncode == 2 and "--extra-body is not valid JSON" in r.stderr
    r = cli("run", "x", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--input-dir", "/no/such/dir")
    assert r.returncode == 2 and "does not exist" in r.stderr
    r = cli("run", "x", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--prompt-config", "/no.yaml")
    assert r.returncode == 2 and "--prompt-config: /no.yaml does not exist" in r.stderr
    r = cli("run", "", "--model", "m")
    assert r.returncode == 2 and "no task" in r.stderr


def test_model_server_failing_exits_1_and_keeps_the_record(scripted, tmp_path, docker_image):
    """A server that answers its model list but fails every request (a server down before the run is one
    line before anything starts: test_failures.py)."""
    srv = scripted({"turns": [{"tool": "submit"}], "faults": [{"requests": [1, 99], "status": 503}]})
    r = cli("run", "x", "--model", "m", "--base-url", srv.url, "--max-retries", "0",
            "--out", str(tmp_path), "--image", docker_image, "-q")
    assert r.returncode == 1
    t = json.loads((tmp_path / "trajectory.json").read_text())
    assert t["exit_reason"] == "model_error" and "model server error 503" in t["exit_detail"]
    assert containers_with_label(f"insandbox.run_id={t['run_id']}") == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_saves_the_run_and_removes_the_container(scripted, tmp_path, docker_image, sig):
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": "echo started"}},
                              {"tool": "execute_bash", "args": {"command": "sleep 600"}}]})
    exe = Path(sys.executable).parent / "insandbox"
    proc = subprocess.Popen([str(exe), "run", "x", "--model", "m", "--base-url", srv.url, "--out",
                             str(tmp_path), "--image", docker_image, "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    owner = owner_of(proc.pid)
    deadline = time.time() + 60
    while len(srv.requests) < 2 and time.time() < deadline:  # the model has asked for `sleep 600`
        time.sleep(0.1)
    time.sleep(0.5)
    assert len(containers_with_label(owner)) == 1
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig, err
    t = json.loads((tmp_path / "trajectory.json").read_text())
    assert t["exit_reason"] == "interrupted" and len(t["steps"]) == 1
    assert containers_with_label(owner) == []


def test_clean_removes_only_leftovers(docker_image):
    code = ("import asyncio, os\n"
            "from insandbox.sandbox import SandboxSpec, create_sandbox\n"
            "async def main():\n"
            "    sb = create_sandbox(SandboxSpec(run_id='leftover-test'))\n"
            "    await sb.start()\n"
            "    os._exit(0)\n"
            "asyncio.run(main())\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    foreign = subprocess.run(["docker", "run", "-d", "--label", "someone-else=1", docker_image, "sleep", "120"],
                             capture_output=True, text=True, check=True).stdout.strip()
    try:
        assert len(containers_with_label("insandbox.run_id=leftover-test")) == 1
        r = cli("clean", "--dry-run")
        assert "would remove" in r.stdout and len(containers_with_label("insandbox.run_id=leftover-test")) == 1
        r = cli("clean")
        assert r.returncode == 0 and "leftover-test" in r.stdout
        assert containers_with_label("insandbox.run_id=leftover-test") == []
        assert containers_with_label("someone-else=1") == [foreign[:12]]
    finally:
        subprocess.run(["docker", "rm", "-f", foreign], capture_output=True)


def test_image_status_reports_size(docker_image):
    r = cli("image", "status", "--image", docker_image)
    assert r.returncode == 0 and "MB" in r.stdout
    r = cli("image", "status", "--image", "insandbox:does-not-exist")
    assert r.returncode == 1 and "does not exist" in r.stderr


def _all_commands() -> set[str]:
    """Every command `insandbox --help` lists, groups' commands as 'image status', 'rl export'."""
    import typer.main

    from insandbox.cli import app

    out = set()
    for name, cmd in typer.main.get_command(app).commands.items():
        sub = getattr(cmd, "commands", None)
        out |= {f"{name} {n}" for n in sub} if sub else {name}
    return out


# the commands that never talk to the sandbox engine, and what they do instead
WITHOUT_ENGINE = {"report": "reads run folders (run below)", "view": "serves run folders",
                  "serve-model": "serves a GGUF model", "scripted-server": "serves a script",
                  "rl build-data": "writes task files", "rl export": "converts a checkpoint",
                  "rl verl-data": "writes parquet files", "pool status": "asks a sandbox service",
                  "export atif": "reads run folders", "import atif": "writes a run folder",
                  "gateway records": "asks a gateway", "gateway sessions": "asks a gateway",
                  "gateway status": "asks a gateway", "gateway pause": "asks a gateway",
                  "gateway resume": "asks a gateway"}
SMOKE_TASKS = REPO / "src/insandbox/rl/trainers/presets/smoke-tasks.jsonl"


def test_every_command_without_a_docker_engine_says_so_in_one_line(scripted, tmp_path, docker_image):
    """Regression: `insandbox image status` printed a 392-line traceback and `rl rollout` 462 lines; each
    command that needs the engine now says it cannot reach it, in one line, and exits 1."""
    srv = scripted(SCRIPT)
    recorded = tmp_path / "recorded"  # a run folder for replay and fork, made while the engine is there
    r = cli("run", "x", "--model", "m", "--base-url", srv.url, "--image", docker_image, "--out",
            str(recorded), "-q")
    assert r.returncode == 0, r.stderr
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "q1", "problem_statement": "Which one?\nA. x\nB. y", "ground_truth": "A"}))
    model = ["--model", "m", "--base-url", srv.url]
    needs_engine = {
        "run": ["run", "x", *model, "--out", str(tmp_path / "run")],
        "bench": ["bench", "chem", "--data", str(rows), *model, "--out", str(tmp_path / "bench")],
        "replay": ["replay", str(recorded)],
        "fork": ["fork", str(recorded), "--step", "1", *model, "--out", str(tmp_path / "fork")],
        "clean": ["clean"],
        "image build": ["image", "build", "--image", "insandbox:never-built"],
        "image build-proxy": ["image", "build-proxy"],
        "image status": ["image", "status"],
        "image export": ["image", "export", "--out", str(tmp_path / "rootfs.tar")],
        "rl rollout": ["rl", "rollout", "--data", str(SMOKE_TASKS), "--out", str(tmp_path / "rollouts"), "--limit",
                       "1"],
        "rl train": ["rl", "train", "--preset", "smoke", "--out", str(tmp_path / "train"), "--limit", "1"],
        "pool serve": ["pool", "serve", "--size", "1", "--socket", str(tmp_path / "pool.sock")],
    }
    assert set(needs_engine) | set(WITHOUT_ENGINE) == _all_commands()  # a new command must be added here
    no_engine = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    for name, argv in needs_engine.items():
        r = cli(*argv, env=no_engine, timeout=600)
        lines = r.stderr.splitlines()
        assert r.returncode == 1 and len(lines) == 1 and r.stdout == "", (name, r.returncode, r.stderr[-3000:])
        assert lines[0].startswith("insandbox: ") and "cannot reach the Docker engine" in lines[0], (name, lines)
    r = cli("report", str(REPO / "tests/data/report_run"), "--out", str(tmp_path / "report"), "--no-plots",
            env=no_engine)
    assert r.returncode == 0 and "75.0%" in r.stdout, r.stderr
    # plain mode has no sandbox: it runs without the engine
    r = cli("run", "x", *model, "--mode", "llm", "--out", str(tmp_path / "plain"), "-q", env=no_engine)
    assert r.returncode == 0, r.stderr


def _without(*modules: str, folder: Path) -> dict:
    """An environment whose Python cannot import `modules`, as on an install without their extra: a
    sitecustomize marks them missing (None in sys.modules makes `import` raise ModuleNotFoundError)."""
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import os, sys\n"
        "for name in os.environ['INSANDBOX_TEST_MISSING'].split(','):\n"
        "    sys.modules[name] = None\n")
    import os

    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "INSANDBOX_TEST_MISSING": ",".join(modules)}


def test_a_command_without_its_extra_names_the_extra_in_one_line(scripted, tmp_path, docker_image):
    """Regression: `insandbox report` without the bench extra ended in ModuleNotFoundError: scipy (61 lines),
    and `bench` would have run every sample before failing at the summary. (`rl rollout` loads its model
    once the engine answers: hence the engine.)"""
    report_run = REPO / "tests/data/report_run"
    srv = scripted({"turns": [{"tool": "submit"}], "llm_turns": [{"content": "Answer: A"}]})
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "q1", "problem_statement": "Which one?\nA. x\nB. y", "ground_truth": "A"}))
    model = ["--model", "m", "--base-url", srv.url]
    cases = [  # (missing modules, command line, the line expected)
        (["scipy"], ["report", str(report_run), "--out", str(tmp_path / "r1"), "--no-plots"],
         "insandbox: report needs scipy, from insandbox's bench extra: pip install 'insandbox[bench]'"),
        (["matplotlib"], ["report", str(report_run), "--out", str(tmp_path / "r2")],
         "insandbox: report needs matplotlib, from insandbox's bench extra: pip install 'insandbox[bench]'"),
        (["scipy"], ["bench", "chem", "--data", str(rows), "--mode", "llm", *model, "--out",
                     str(tmp_path / "b1")],
         "insandbox: bench needs scipy, from insandbox's bench extra: pip install 'insandbox[bench]'"),
        (["math_verify"], ["bench", "math", "--data", str(rows), "--mode", "llm", *model, "--out",
                           str(tmp_path / "b2")],
         "insandbox: bench needs math_verify, from insandbox's bench extra: pip install 'insandbox[bench]'"),
        (["torch", "transformers", "trl"], ["rl", "train", "--preset", "smoke", "--out", str(tmp_path / "t")],
         "insandbox: rl train needs torch, from insandbox's rl extra: pip install 'insandbox[rl]' (install the "
         "torch build for your hardware first)"),
        (["transformers"], ["rl", "rollout", "--data", str(SMOKE_TASKS), "--policy", "some/model", "--out",
                            str(tmp_path / "ro"), "--limit", "1"],
         "insandbox: rl rollout needs transformers, from insandbox's rl extra: pip install 'insandbox[rl]'"),
    ]
    for modules, argv, expected in cases:
        r = cli(*argv, env=_without(*modules, folder=tmp_path / "site"))
        assert r.returncode == 1 and r.stderr.splitlines() == [expected], (argv[0], r.stderr[-3000:])
    assert not (tmp_path / "b1").exists() and not (tmp_path / "b2").exists()  # checked before anything ran
    assert srv.requests == []


def test_image_is_built_on_first_use(scripted, tmp_path, docker_image):
    """A missing insandbox:* image is built before the run (layers come from the build cache)."""
    tag = "insandbox:first-use-test"
    subprocess.run(["docker", "rmi", tag], capture_output=True)
    srv = scripted({"turns": [{"tool": "submit"}]})
    try:
        r = cli("run", "x", "--model", "m", "--base-url", srv.url, "--out", str(tmp_path), "--image", tag,
                "-q", timeout=900)
        assert r.returncode == 0, r.stderr
        assert "not found: building it" in r.stdout and "built insandbox:first-use-test" in r.stdout
        assert subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0
    finally:
        subprocess.run(["docker", "rmi", tag], capture_output=True)


def _one_clear_line(r: subprocess.CompletedProcess) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("insandbox: "), r.stderr
    assert "Traceback" not in r.stderr and "validation error" not in r.stderr and "pydantic" not in r.stderr
    return lines[0]


def test_bad_arguments_exit_2_with_one_line_and_create_nothing(scripted, tmp_path, docker_image):
    """Regressions: --query-file /nonexistent gave a traceback and rc 1; --network nonsense was
    accepted, failed as sandbox_error and left a run folder; a missing --input-dir printed pydantic."""
    run_dir = tmp_path / "run"
    srv = scripted({"turns": [{"tool": "submit"}]})  # a server that answers: the model server is no mistake here
    base = ["--model", "m", "--base-url", srv.url, "--out", str(run_dir)]
    assert "--query-file /nonexistent: No such file" in _one_clear_line(
        cli("run", "--query-file", "/nonexistent", *base))
    assert "--network 'nonsense': no such Docker network (known: bridge, host, none" in _one_clear_line(
        cli("run", "x", "--network", "nonsense", "--image", docker_image, *base))
    assert _one_clear_line(cli("run", "x", "--input-dir", "/no/such/dir", *base)) == \
        "insandbox: --input-dir: /no/such/dir does not exist"
    assert "--image 'insandbox-nope:1' not found" in _one_clear_line(
        cli("run", "x", "--image", "insandbox-nope:1", *base)).replace("image ", "--image ")
    assert "No such option: --bogus" in _one_clear_line(cli("run", "x", "--bogus"))
    assert "'--max-steps'" in _one_clear_line(cli("run", "x", "--max-steps", "many"))
    assert "--memory: 'lots' is not a size" in _one_clear_line(cli("run", "x", "--memory", "lots", *base))
    assert "--tool-choice" in _one_clear_line(cli("run", "x", "--tool-choice", "any", *base))
    assert "--env wants KEY=VALUE" in _one_clear_line(cli("bench", "chem", "--env", "NOEQUALS", *base))
    assert "--mode is sandbox, llm or both" in _one_clear_line(cli("bench", "chem", "--mode", "x"))
    assert "--max-sandboxes" in _one_clear_line(cli("run", "x", "--max-sandboxes", "0", *base))
    assert "INSANDBOX_ADMIT_MEMORY_RESERVE='lots'" in _one_clear_line(
        cli("run", "x", "--image", docker_image, *base, env={"INSANDBOX_ADMIT_MEMORY_RESERVE": "lots"}))
    assert not run_dir.exists()  # nothing was created for any of them


def test_bench_takes_every_run_option_and_every_option_has_help():
    import typer.main

    from insandbox.cli.app import app, click_exceptions  # noqa: F401

    root = typer.main.get_command(app)
    commands = {name: cmd for name, cmd in root.commands.items()}
    commands.update({f"image {n}": c for n, c in commands.pop("image").commands.items()})

    def options(cmd) -> set[str]:
        return {o for p in cmd.params if p.param_type_name == "option" for o in p.opts}

    run_only = {"--query-file", "--mode", "--input-dir", "--out", "--quiet", "-q", "--json"}
    missing = options(commands["run"]) - run_only - options(commands["bench"])
    assert not missing, f"bench lacks {missing}"
    for needed in ("--prompt-config", "--env", "--output-limit", "--max-retries", "--request-timeout",
                   "--send-reasoning", "--tool-choice", "--stuck-after"):
        assert needed in options(commands["run"]) and needed in options(commands["bench"])
    for name, cmd in commands.items():
        for p in cmd.params:
            if p.param_type_name == "option" and p.name != "help":
                assert (p.help or "").strip(), f"insandbox {name} {p.opts[0]} has no help text"


def test_request_timeout_and_send_reasoning_reach_the_model_client(scripted, tmp_path, docker_image):
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": "true"}, "reasoning_content": "I think"},
                              {"tool": "submit", "latency": 2.0}]})
    r = cli("run", "x", "--model", "m", "--base-url", srv.url, "--send-reasoning", "--request-timeout", "0.5",
            "--max-retries", "0", "--out", str(tmp_path), "--image", docker_image, "-q", "--json")
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert out["exit_reason"] == "model_error" and "within 0.5s" in out["exit_detail"]
    deadline = time.time() + 10
    while len(srv.requests) < 2 and time.time() < deadline:  # the server logs it once its 2 s are over
        time.sleep(0.05)
    second = srv.requests[1]["messages"]
    assert second[2]["role"] == "assistant" and second[2]["reasoning_content"] == "I think"


def test_host_network_is_warned_about_every_time(tmp_path):
    for command in (["run", "x"], ["bench", "chem"]):
        r = cli(*command, "--network", "host", "--extra-body", "[1]", "--out", str(tmp_path / "o"))
        assert r.returncode == 2 and "--extra-body must be a JSON object" in r.stderr
        assert "warning: --network host gives the sandbox this machine's network" in r.stderr
        assert "model server included" in r.stderr
    r = cli("run", "x", "--network", "none", "--extra-body", "[1]", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "warning" not in r.stderr


def test_run_prints_its_cost_and_a_bad_price_file_is_one_line(scripted, tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "INSANDBOX_PRICES": ""}
    prices = tmp_path / "prices.yaml"
    prices.write_text("prices:\n  priced-model: {input: 1, output: 2}\n")
    srv = scripted({"turns": [{"content": "42", "usage": {"prompt_tokens": 1000, "completion_tokens": 500}}]})
    base = ["--mode", "llm", "--model", "priced-model", "--base-url", srv.url]
    r = cli("run", "q", *base, "--prices", str(prices), "--out", str(tmp_path / "run"), "--json", env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["totals"]["cost_usd"] == 0.002 and out["price"]["entry"] == "priced-model"  # 1000 x 1 + 500 x 2
    assert "$0.00200 (priced-model: $1 in, $2 out per M tokens)" in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("prices:\n  priced-model: {input: 1, output: 2, cached: 0.5}\n")
    for command in ("run", "bench"):
        line = _one_clear_line(cli(command, "q" if command == "run" else "chem", *base, "--prices", str(bad),
                                   "--out", str(tmp_path / f"bad-{command}"), env=env))
        assert line == f"insandbox: {bad}: prices.priced-model.cached: unknown key (known: input, output, " \
                       "cache_read, cache_write, note)"
        assert not (tmp_path / f"bad-{command}").exists()


def test_view_serves_a_folder_and_says_where(tmp_path):
    from tests.viewer.synthetic import write_run

    write_run(tmp_path / "runs" / "one", task_id="counting")
    write_run(tmp_path / "runs" / "two")
    exe = Path(sys.executable).parent / "insandbox"
    proc = subprocess.Popen([str(exe), "view", str(tmp_path / "runs"), "--port", "0", "--no-open"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("insandbox view: http://127.0.0.1:"), line
        url = line.split()[2]
        import urllib.request

        with urllib.request.urlopen(url) as r:
            assert "counting" in r.read().decode()
        port = int(url.rsplit(":", 1)[1].strip("/"))
        r = cli("view", str(tmp_path / "runs"), "--port", str(port), "--no-open")  # the port is taken now
        assert r.returncode == 2 and f"port {port} is in use" in r.stderr, r.stderr
    finally:
        proc.terminate()
        proc.wait(10)
    r = cli("view", str(tmp_path / "nowhere"), "--no-open")
    assert r.returncode == 2 and "is not a folder" in r.stderr
    r = cli("view", str(tmp_path / "runs"), "--host", "no-such-host.invalid", "--no-open")
    assert r.returncode == 2 and "cannot listen" in r.stderr
    assert "warning: listening on no-such-host.invalid" in r.stderr


def test_version_is_the_packages():
    """Regression: there was no `insandbox --version`."""
    import insandbox

    r = cli("--version")
    assert r.returncode == 0 and r.stdout == f"insandbox {insandbox.__version__}\n" and r.stderr == ""


def test_image_export_refuses_what_it_cannot_write_in_one_line(tmp_path, docker_image):
    """`insandbox image export` (the README's first step without Docker; tests/sandbox/bwrap/test_recipe.py runs
    the whole recipe): a folder that holds files, an image that is not there."""
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine.txt").write_text("keep")
    r = cli("image", "export", "--image", docker_image, "--out", str(tmp_path / "full"))
    assert r.returncode == 2 and r.stderr == f"insandbox: --out {tmp_path / 'full'} is not empty\n", r.stderr
    assert (tmp_path / "full" / "mine.txt").read_text() == "keep"
    r = cli("image", "export", "--image", "insandbox:never-built", "--out", str(tmp_path / "r.tar"))
    assert r.returncode == 1 and r.stderr.startswith("insandbox: insandbox:never-built does not exist; build it with")
    assert not (tmp_path / "r.tar").exists()
