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
