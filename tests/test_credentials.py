"""Credentials given in --base-url (userinfo) and --extra-body reach the model server and nothing else:
no file of a run or benchmark folder, no line on the console, no error message; a recording that lost
one to redaction asks for it again instead of sending the mask (fork, bench --resume)."""
from __future__ import annotations

import base64
import json
import re
import time
from pathlib import Path

import pytest

from insandbox.core.redact import MARK
from tests.helpers import cli

PASSWORD = "p%40ss-SECRET1"  # percent-encoded @: the server gets user:p@ss-SECRET1
BASIC = base64.b64encode(b"user:p@ss-SECRET1").decode()
API_KEY = "sk-KEY0SECRET-0123456789"
EXTRA = {"api_key": "SECRET2", "nested": {"token": "SECRET3"}, "temperature_x": 1, "upstream": API_KEY}
RECORDED_EXTRA = {"api_key": MARK, "nested": {"token": MARK}, "temperature_x": 1, "upstream": MARK}
SECRETS = ["SECRET1", "p@ss", "SECRET2", "SECRET3", "KEY0SECRET", BASIC]
ENV = {"OPENAI_API_KEY": API_KEY, "COLUMNS": "2000"}  # wide: the console wraps no line, so none hides a secret
SCRIPT = {"turns": [{"tool": "execute_bash", "args": {"command": "echo 42 > /testbed/answer.txt"}},
                    {"tool": "execute_bash", "args": {"command": "echo done"}}, {"tool": "submit"}]}


def with_userinfo(url: str) -> str:
    return url.replace("http://", f"http://user:{PASSWORD}@", 1)


def shown(url: str) -> str:
    return url.replace("http://", f"http://user:{MARK}@", 1)


def leaks(folder: Path, *texts: str) -> list[str]:
    """Where a secret appears: any file under `folder` (at any depth, any format), or the texts."""
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            found += [f"{path.relative_to(folder)}: {s}" for s in SECRETS if s.encode() in data]
    for i, text in enumerate(texts):
        squeezed = re.sub(r"\s+", "", text)  # also a secret a line break would have cut in two
        found += [f"output {i}: {s}" for s in SECRETS if s in text or s in squeezed]
    return found


def assert_received(requests: list[dict]) -> None:
    """The server got the real credentials with every chat request."""
    assert requests
    for req in requests:
        assert req["authorization"] == f"Basic {BASIC}"
        params = req["params"]
        assert params["api_key"] == "SECRET2" and params["nested"] == {"token": "SECRET3"}
        assert params["temperature_x"] == 1 and params["upstream"] == API_KEY


def one_line(r) -> str:
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    return r.stderr


@pytest.mark.parametrize("flags", [[], ["-q"], ["--json"]])
def test_a_run_sends_the_credentials_and_stores_and_prints_none(scripted, tmp_path, docker_image, flags):
    srv = scripted(SCRIPT)
    run_dir = tmp_path / "run"
    r = cli("run", "Answer 42", "--base-url", with_userinfo(srv.url), "--extra-body", json.dumps(EXTRA),
            "--out", str(run_dir), "--image", docker_image, "--max-steps", "5", *flags, env=ENV)
    assert r.returncode == 0, r.stderr
    assert_received(srv.requests)
    assert leaks(run_dir, r.stdout, r.stderr) == []
    config = json.loads((run_dir / "trajectory.json").read_text())["config"]
    assert config["base_url"] == shown(srv.url) and config["extra_body"] == RECORDED_EXTRA
    assert config["api_key_set"] is True and config["model"] == "scripted"  # listed through the credentials
    assert f"@ {shown(srv.url)}" in r.stdout + r.stderr  # the banner still says which server
    if "--json" in flags:
        assert json.loads(r.stdout)["answer"] == "42\n"


@pytest.mark.parametrize("case", ["500 then 401, echoing the request", "refused"])
def test_model_errors_name_the_server_without_its_credentials(scripted, tmp_path, docker_image, case):
    srv = None
    if case == "refused":
        url = "http://127.0.0.1:9/v1"
        expected = f"cannot reach the model server at {shown(url)}"
    else:  # the server's error message echoes every credential it got
        echo = f"bad credentials: {json.dumps(EXTRA)} {BASIC} via {with_userinfo('http://x/')}"
        srv = scripted({"turns": [{"tool": "submit"}],
                        "faults": [{"requests": [1, 9], "status": [500, 401], "message": echo}]})
        url = srv.url
        expected = f"authentication failed at {shown(url)}: bad credentials: "
    run_dir = tmp_path / "run"
    for flags in ([], ["--json"]):
        r = cli("run", "x", "--model", "m", "--base-url", with_userinfo(url), "--extra-body", json.dumps(EXTRA),
                "--max-retries", "1", "--out", str(run_dir), "--image", docker_image, *flags, env=ENV)
        assert r.returncode == 1, r.stderr
        if srv is None:  # nothing listens: said before the run starts (models/endpoint.py), in one line
            assert r.stderr.strip() == f"insandbox: {expected}: connection refused (nothing listens on " \
                                       "127.0.0.1:9; is the server started?)" and not run_dir.exists()
            assert leaks(tmp_path, r.stdout, r.stderr) == []
            continue
        t = json.loads((run_dir / "trajectory.json").read_text())
        assert t["exit_reason"] == "model_error" and expected in t["exit_detail"], t["exit_detail"]
        assert expected in r.stdout + r.stderr
        assert leaks(run_dir, r.stdout, r.stderr) == []
    if srv is not None:
        assert_received(srv.requests)
        assert [q["status"] for q in srv.requests] == [500, 401, 500, 401]
    # with no --model the server is asked for its models: that error names the server too, and nothing else
    r = cli("run", "x", "--base-url", with_userinfo("http://127.0.0.1:9/v1"), "--out", str(tmp_path / "o"),
            "--image", docker_image, env=ENV)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"cannot reach the model server at {shown('http://127.0.0.1:9/v1')}" in r.stderr
    assert leaks(tmp_path, r.stdout, r.stderr) == []


def test_a_benchmark_sends_the_credentials_stores_none_and_resumes_only_with_them(scripted, tmp_path, docker_image):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "problem_statement": f"q{i} Which one?\nA. x\nB. y",
                                        "ground_truth": "B"}) + "\n" for i in (1, 2)))
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": "echo B > /testbed/answer.txt"}},
                              {"tool": "submit"}], "llm_turns": [{"content": "Answer: B"}]})
    url, run_dir = with_userinfo(srv.url), tmp_path / "bench"
    r = cli("bench", "chem", "--data", str(data), "--mode", "both", "--model", "m", "--base-url", url,
            "--extra-body", json.dumps(EXTRA), "--image", docker_image, "--out", str(run_dir), env=ENV)
    assert r.returncode == 0, r.stderr
    assert_received(srv.requests)
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(records) == 4 and all(rec["score"] == 1.0 for rec in records)
    assert (run_dir / "report" / "report.html").is_file()
    assert leaks(run_dir, r.stdout, r.stderr) == []
    config = json.loads((run_dir / "bench.json").read_text())["config"]
    assert config["run"]["base_url"] == config["judge_base_url"] == shown(srv.url)
    assert config["run"]["extra_body"] == RECORDED_EXTRA

    # bench.json cannot give the credentials back: the resume asks for them, and for the same ones
    (run_dir / "results.jsonl").write_text("".join(json.dumps(rec) + "\n" for rec in records[:3]))
    resume = ["bench", "--resume", str(run_dir), "-q"]
    assert "recorded --base-url held a credential" in one_line(cli(*resume, env=ENV))
    assert "recorded --extra-body held a credential" in one_line(cli(*resume, "--base-url", url, env=ENV))
    other = with_userinfo(srv.url.replace("/v1", "/v2"))
    assert "is not the recorded" in one_line(cli(*resume, "--base-url", other, "--extra-body", json.dumps(EXTRA),
                                                 env=ENV))
    changed = json.dumps({**EXTRA, "temperature_x": 2})
    assert "is not the recorded" in one_line(cli(*resume, "--base-url", url, "--extra-body", changed, env=ENV))
    t_resume = time.time()
    r = cli(*resume, "--base-url", url, "--extra-body", json.dumps(EXTRA), env=ENV)
    assert r.returncode == 0, r.stderr
    again = [q for q in srv.requests if q["t_recv"] >= t_resume]
    assert_received(again)
    assert len((run_dir / "results.jsonl").read_text().splitlines()) == 4
    assert leaks(run_dir, r.stdout, r.stderr) == []


def test_a_fork_of_a_redacted_run_asks_for_the_credentials_and_then_sends_them(scripted, tmp_path, docker_image):
    srv = scripted(SCRIPT)
    url, run_dir = with_userinfo(srv.url), tmp_path / "run"
    r = cli("run", "Answer 42", "--base-url", url, "--extra-body", json.dumps(EXTRA), "--out", str(run_dir),
            "--image", docker_image, "-q", env=ENV)
    assert r.returncode == 0, r.stderr
    fork = ["fork", str(run_dir), "--step", "1", "--branches", "1", "-q"]
    line = one_line(cli(*fork, env=ENV))
    assert "recorded --base-url held a credential" in line and shown(srv.url) in line
    assert "recorded --extra-body held a credential" in one_line(cli(*fork, "--base-url", url, env=ENV))
    assert not (run_dir / "forks").exists()
    t_fork = time.time()
    r = cli(*fork, "--base-url", url, "--extra-body", json.dumps(EXTRA), "--json", env=ENV)
    assert r.returncode == 0, r.stderr
    assert_received([q for q in srv.requests if q["t_recv"] >= t_fork])
    branch = json.loads((run_dir / "forks/step-1/branch-1/trajectory.json").read_text())
    assert branch["config"]["base_url"] == shown(srv.url) and branch["config"]["extra_body"] == RECORDED_EXTRA
    assert leaks(run_dir, r.stdout, r.stderr) == []
