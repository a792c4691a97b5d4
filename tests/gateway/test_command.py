"""`insandbox gateway` as a process: a crash keeps every answered turn, an upstream without token ids is
refused in one line, and `gateway records` prints one JSON record per line."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from .conftest import CALL, SUBMIT
from .test_sessions import START, TOOLS
from .token_upstream import TokenUpstream

INSANDBOX = [sys.executable, "-m", "insandbox"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gateway(upstream_url: str, store, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([*INSANDBOX, "gateway", "--upstream", upstream_url, "--port", str(port),
                             "--store", str(store)], stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    assert "gateway listening on" in line, line + proc.stderr.read()
    return proc


@pytest.fixture
def upstream():
    up = TokenUpstream([CALL.format("ls"), CALL.format("pwd"), CALL.format("id"), SUBMIT])
    url = up.start()
    yield up, url
    up.stop_serving()


def chat(port: int, messages: list[dict]) -> dict:
    r = httpx.post(f"http://127.0.0.1:{port}/sessions/crash/v1/chat/completions", timeout=60,
                   headers={"Authorization": "Bearer x"}, json={"messages": messages, "tools": TOOLS})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]


def records(port: int) -> list[dict]:
    out = subprocess.run([*INSANDBOX, "gateway", "records", "crash", "--gateway-url", f"http://127.0.0.1:{port}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_a_crash_mid_session_keeps_every_answered_turn_and_the_session_goes_on(upstream, tmp_path):
    up, url = upstream
    port = free_port()
    proc = start_gateway(url, tmp_path / "store", port)
    messages = list(START)
    try:
        for out in ("a b", "/testbed"):
            reply = chat(port, messages)
            messages += [reply, {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": out}]
        before = records(port)
        up.delay = 30.0  # the next turn is in flight when the gateway dies
        threading_request = subprocess.Popen([sys.executable, "-c", (
            "import httpx,json,sys; httpx.post(sys.argv[1], json=json.loads(sys.argv[2]), timeout=60)"),
            f"http://127.0.0.1:{port}/sessions/crash/v1/chat/completions",
            json.dumps({"messages": messages, "tools": TOOLS})], stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    threading_request.wait(60)
    up.delay = 0.0
    proc = start_gateway(url, tmp_path / "store", port)
    try:
        after = records(port)
        assert after == before and after[0]["num_turns"] == 2
        reply = chat(port, messages)  # the harness retries the turn the crash lost: the same conversation goes on
        assert reply["tool_calls"][0]["function"]["arguments"] == '{"command": "id"}'
        (rec,) = records(port)
        assert rec["num_turns"] == 3 and rec["response_ids"][:len(before[0]["response_ids"])] == before[0][
            "response_ids"]
    finally:
        proc.terminate()
        proc.wait(30)


def test_an_upstream_without_token_ids_is_refused_in_one_line(tmp_path):
    up = TokenUpstream([SUBMIT], token_ids=False)
    url = up.start()
    try:
        out = subprocess.run([*INSANDBOX, "gateway", "--upstream", url, "--port", str(free_port()), "--store",
                              str(tmp_path)], capture_output=True, text=True, timeout=120)
    finally:
        up.stop_serving()
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot return token ids" in lines[0] and "vLLM" in lines[0], out.stderr


def test_an_upstream_that_is_not_there_is_refused_in_one_line(tmp_path):
    out = subprocess.run([*INSANDBOX, "gateway", "--upstream", f"http://127.0.0.1:{free_port()}/v1", "--port",
                          str(free_port()), "--store", str(tmp_path), "--tokenizer",
                          str(__import__("insandbox.models.local_server", fromlist=["x"]).default_gguf())],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "cannot return token ids" in out.stderr


def test_records_of_an_unknown_session_and_of_no_gateway_say_so(upstream, tmp_path):
    _, url = upstream
    port = free_port()
    proc = start_gateway(url, tmp_path / "store", port)
    try:
        out = subprocess.run([*INSANDBOX, "gateway", "records", "nobody", "--gateway-url",
                              f"http://127.0.0.1:{port}"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 1 and "no session 'nobody'" in out.stderr
    finally:
        proc.terminate()
        proc.wait(30)
    out = subprocess.run([*INSANDBOX, "gateway", "records", "x", "--gateway-url", f"http://127.0.0.1:{port}"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "no gateway at" in out.stderr


def test_the_sequence_of_the_docs_serve_model_gateway_run_records(docker_image, tmp_path):
    """As docs/rl/gateway.md shows it: the embedded model as upstream, `insandbox run` pointed at a session,
    then one JSON record per line with a logprob per model token and the policy version."""
    model_port, gateway_port = free_port(), free_port()
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    model = subprocess.Popen([*INSANDBOX, "serve-model", "--port", str(model_port)], stderr=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL)
    gateway = None
    try:
        for _ in range(600):
            try:
                httpx.get(f"http://127.0.0.1:{model_port}/v1/models", timeout=2)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        gateway = subprocess.Popen([*INSANDBOX, "gateway", "--upstream", f"http://127.0.0.1:{model_port}/v1",
                                    "--port", str(gateway_port)], stderr=subprocess.PIPE, text=True, env=env)
        assert "gateway listening on" in gateway.stderr.readline()
        run = subprocess.run([*INSANDBOX, "run", "Write the word hello to /testbed/answer.txt", "--base-url",
                              f"http://127.0.0.1:{gateway_port}/sessions/demo/v1", "--model", "local", "--api-key",
                              "x", "--max-steps", "2", "--max-tokens", "32", "--image", docker_image, "--out",
                              str(tmp_path / "runs")], capture_output=True, text=True, timeout=900, env=env)
        assert run.returncode == 0, run.stderr[-2000:]
        out = subprocess.run([*INSANDBOX, "gateway", "records", "demo", "--gateway-url",
                              f"http://127.0.0.1:{gateway_port}"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and out.stderr == "", out.stderr
        (record,) = [json.loads(line) for line in out.stdout.splitlines()]
        assert record["num_turns"] == 2
        assert len(record["response_ids"]) == len(record["response_mask"]) > 0
        assert len(record["logprobs"]) == sum(record["response_mask"]) > 0
        assert all(lp <= 0 for lp in record["logprobs"])
        assert record["policy_version"] == 0 and record["prompt_ids"]
    finally:
        for proc in (gateway, model):
            if proc is not None:
                proc.terminate()
                proc.wait(30)


def test_pause_resume_and_status_from_the_command_line(upstream, tmp_path):
    _, url = upstream
    port = free_port()
    store = tmp_path / "store"
    proc = start_gateway(url, store, port)
    gw = ["--gateway-url", f"http://127.0.0.1:{port}"]

    def cli(*args):
        out = subprocess.run([*INSANDBOX, "gateway", *args], capture_output=True, text=True, timeout=60)
        return out.returncode, out.stdout, out.stderr

    try:
        assert cli("pause", *gw, "--store", str(tmp_path / "elsewhere"))[0] == 1  # no token there: refused
        code, out, _ = cli("pause", *gw, "--store", str(store))
        assert code == 0 and json.loads(out)["paused"] is True
        code, out, _ = cli("resume", *gw, "--store", str(store), "--policy-version", "4")
        assert code == 0 and json.loads(out)["policy_version"] == 4 and json.loads(out)["paused"] is False
        code, out, _ = cli("status", *gw)
        assert code == 0 and json.loads(out)["policy_version"] == 4
        chat(port, START)
        code, out, _ = cli("sessions", *gw)
        assert code == 0 and out.split("\t")[0] == "crash" and "1 turn(s)" in out
        assert json.loads(cli("records", "crash", *gw)[1])["policy_version"] == 4
    finally:
        proc.terminate()
        proc.wait(30)
