"""The embedded default model (llama.cpp + SmolLM2-135M): end to end, and its server's lifetime.
Slow-ish (a model load is ~0.5 s, a first prompt ~4 s): kept to a few tests."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from insandbox import arun
from insandbox.models.embedded import EmbeddedClient
from insandbox.models.local_server import to_plain_messages, tool_call_schema
from insandbox.tools import default_tools
from tests.helpers import cli, containers_with_label

TASK = ("Write a Python script that prints the first 10 prime numbers, run it, and save the output to "
        "/testbed/output/primes.txt")
NO_MODEL_ENV = {"INSANDBOX_MODEL": "", "INSANDBOX_BASE_URL": "", "OPENAI_API_KEY": "", "INSANDBOX_API_KEY": ""}


def server_pids() -> list[int]:
    """Processes of the embedded model server, on this machine."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if b"insandbox.models.local_server" in cmd and Path(f"/proc/{entry}/stat").read_text().split()[2] != "Z":
                pids.append(int(entry))
    return pids


def port_is_free(port: int) -> bool:
    """Can a new server listen on it? (SO_REUSEADDR as servers set it: TIME_WAIT is not "in use")"""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
            return True
        except OSError:
            return False


def wait_until(cond, timeout=10.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def test_run_with_no_model_configured_uses_the_embedded_model(tmp_path, docker_image):
    before = set(server_pids())
    r = cli("run", TASK, "--max-steps", "2", "--out", str(tmp_path), "--image", docker_image, "--json",
            env=NO_MODEL_ENV, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "embedded local model" in r.stderr and "SmolLM2" in r.stderr
    t = json.loads((tmp_path / "trajectory.json").read_text())
    assert t["exit_reason"] in ("max_steps", "submitted") and t["config"]["base_url"] == "embedded"
    steps = t["steps"]
    assert steps and all(s["usage_reported"] and s["prompt_tokens"] > 500 and s["completion_tokens"] > 0
                         for s in steps)
    first = steps[0]["tool_calls"][0]  # the grammar makes the reply a real call; the first is never submit
    assert first["name"] in ("execute_bash", "str_replace_editor")
    assert first["output"] and (first["exit_code"] is not None or first["name"] == "str_replace_editor")
    assert containers_with_label(f"insandbox.run_id={t['run_id']}") == []
    assert set(server_pids()) <= before  # the server is gone with the run


def test_server_stops_cleanly_after_use_and_when_the_run_fails(run_async, tmp_path, docker_image):
    async def body():
        client = EmbeddedClient()
        tools = [t.schema() for t in default_tools()]
        reply = await client.complete([{"role": "user", "content": "List the files in /testbed."}], tools)
        assert reply.tool_calls and reply.tool_calls[0].name in ("execute_bash", "str_replace_editor")
        port, pid = client.server.port, client.server.proc.pid
        await client.close()
        assert port_is_free(port) and pid not in server_pids()

        # a run cancelled half way (Ctrl-C) stops its model server too
        task = asyncio.ensure_future(arun(TASK, max_steps=50, output_dir=tmp_path / "c", image=docker_image))
        assert await asyncio.get_running_loop().run_in_executor(None, lambda: wait_until(server_pids, 60))
        await asyncio.sleep(1.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert wait_until(lambda: not server_pids(), 10)
        assert json.loads((tmp_path / "c/trajectory.json").read_text())["exit_reason"] == "interrupted"

    for key in NO_MODEL_ENV:
        os.environ.pop(key, None)
    run_async(body())


def test_a_bad_model_file_fails_clearly(tmp_path, docker_image):
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"this is not a GGUF file")
    r = cli("run", "x", "--gguf", str(bad), "--out", str(tmp_path / "r"), "--image", docker_image, "-q",
            env=NO_MODEL_ENV)
    assert r.returncode == 1
    t = json.loads((tmp_path / "r/trajectory.json").read_text())
    assert t["exit_reason"] == "model_error" and "failed to start" in t["exit_detail"]
    assert not server_pids()
    r = cli("run", "x", "--gguf", str(tmp_path / "missing.gguf"), env=NO_MODEL_ENV)
    assert r.returncode == 2 and "no such file" in r.stderr


def test_server_dies_with_its_parent():
    code = ("import asyncio, os\n"
            "from insandbox.models.embedded import EmbeddedServer\n"
            "async def main():\n"
            "    s = EmbeddedServer()\n"
            "    await s.wait_ready()\n"
            "    print(s.proc.pid, s.port, flush=True)\n"
            "    os._exit(0)\n"
            "asyncio.run(main())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    pid, port = map(int, out.stdout.split())
    assert wait_until(lambda: pid not in server_pids(), 10) and wait_until(lambda: port_is_free(int(port)), 10)


def test_serve_model_command():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).parent / "insandbox"
    proc = subprocess.Popen([str(exe), "serve-model", "--port", str(port), "--n-ctx", "2048"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}/v1"

    def post(body: dict) -> tuple[int, dict]:
        req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    try:
        def up():
            try:
                with urllib.request.urlopen(base + "/models", timeout=2) as r:
                    return json.load(r)["data"][0]["id"].startswith("SmolLM2")
            except OSError:
                return False
        assert wait_until(up, 60)
        tools = [t.schema() for t in default_tools()]
        code, body = post({"model": "x", "messages": [{"role": "user", "content": "Show the current directory."}],
                           "tools": tools})
        call = body["choices"][0]["message"]["tool_calls"][0]["function"]
        assert code == 200 and call["name"] in ("execute_bash", "str_replace_editor")
        assert isinstance(json.loads(call["arguments"]), dict) and body["usage"]["prompt_tokens"] > 0
        code, body = post({"model": "x", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8})
        assert code == 200 and body["choices"][0]["message"]["content"]  # no tools: plain text
        code, body = post({"model": "x", "messages": [{"role": "user", "content": "word " * 3000}]})
        assert code == 400 and "maximum context length is 2048" in body["error"]["message"]
    finally:
        proc.terminate()
        proc.wait(10)
    assert port_is_free(port)


def test_tool_history_is_rewritten_for_a_plain_chat_template():
    tools = [t.schema() for t in default_tools()]
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "execute_bash", "arguments": '{"command": "ls"}'}},
                {"id": "b", "type": "function", "function": {"name": "submit", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "a", "content": "x.txt"},
            {"role": "tool", "tool_call_id": "b", "content": "ok"}]
    plain = to_plain_messages(msgs, tools)
    assert [m["role"] for m in plain] == ["system", "user", "assistant", "user"]
    assert "# Tools" in plain[0]["content"] and '"name": "str_replace_editor"' in plain[0]["content"]
    assert json.loads(plain[2]["content"].splitlines()[0]) == {"name": "execute_bash", "arguments": {"command": "ls"}}
    assert plain[3]["content"] == "Result of execute_bash:\nx.txt\n\nResult of submit:\nok"
    schema = tool_call_schema(tools)
    names = [o["properties"]["name"]["const"] for o in schema["anyOf"]]
    assert names == ["execute_bash", "str_replace_editor", "submit"]
