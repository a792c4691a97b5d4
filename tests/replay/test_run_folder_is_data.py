"""A run folder is data (issue 21, point 4): replay and fork of a folder an attacker tampered with.

Each test makes a real run, tampers with a copy of its folder as someone handing it over could,
and runs the real CLI: a refusal is exit 2 with one line, no container created by that process
(read from the engine's events, so other tests' containers do not count), no file written, and the
planted secret in no output. Granted on the command line, the same settings work and are shown.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from insandbox import arun
from insandbox.models.scripted_server import ScriptedServer
from tests.helpers import cli

SECRET = "s3cr3t-host-only-5d41402a"
SCRIPT = {"turns": [
    {"tool": "execute_bash", "args": {"command": "cat /testbed/input/notes/a.txt; ls -A /testbed/input"}},
    {"tool": "execute_bash", "args": {"command": "mount -t tmpfs none /mnt 2>/dev/null && echo MOUNTED || "
                                                 "echo NO-MOUNT; echo out > /testbed/output/o.txt"}},
    {"tool": "submit"}]}
BRANCH = {"turns": [{"content": "never played"},
                    {"tool": "execute_bash", "args": {"command": "echo branch > /testbed/output/b.txt"}},
                    {"tool": "submit"}]}


@pytest.fixture(scope="module")
def recorded(docker_image, tmp_path_factory):
    """One real run (its model server kept up for the module), copied by each test before tampering."""
    srv = ScriptedServer(SCRIPT).start()
    run = tmp_path_factory.mktemp("pristine") / "run"
    import asyncio

    result = asyncio.run(arun("do it", model="scripted", base_url=srv.url, output_dir=run, image=docker_image,
                              max_steps=10, input_files={"notes/a.txt": "alpha\n"}))
    assert result.exit_reason == "submitted"
    yield run, srv
    srv.stop()


@pytest.fixture
def bait(tmp_path):
    """A host folder the attacker wants read or written: a secret file in it."""
    folder = tmp_path / "bait"
    folder.mkdir()
    (folder / "id_rsa").write_text(SECRET + "\n")
    return folder


def _copy(recorded, tmp_path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(recorded[0], run, symlinks=True)
    return run


def _edit(run: Path, change) -> None:
    data = json.loads((run / "trajectory.json").read_text())
    change(data)
    (run / "trajectory.json").write_text(json.dumps(data))


def _tree(root: Path) -> dict:
    """Every entry under root (links not followed), with what would show a write."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(folder) / name
            st = p.lstat()
            out[str(p)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def _created_by(pid: int, since: float) -> list[str]:
    """Containers insandbox created from process `pid` since then, from the engine's events."""
    from insandbox.sandbox.docker import LABEL_OWNER

    r = subprocess.run(["docker", "events", "--since", f"{since:.3f}", "--until", f"{time.time():.3f}",
                        "--filter", "type=container", "--filter", "event=create", "--filter", "label=insandbox",
                        "--format", "{{json .Actor.Attributes}}"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    owners = [json.loads(line).get(LABEL_OWNER, "") for line in r.stdout.splitlines() if line.strip()]
    return [o for o in owners if o.split(":")[:2] == [os.uname().nodename, str(pid)]]


def refused(tmp_path: Path, *args: str, timeout: float = 120) -> str:
    """Run the CLI as tests.helpers.cli does; assert a refusal: exit 2, one line, nothing created, no
    secret shown. Returns the line."""
    before = _tree(tmp_path)
    since = time.time() - 1
    exe = Path(sys.executable).parent / "insandbox"
    p = subprocess.Popen([str(exe), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout)
    finally:
        p.kill()
    assert p.returncode == 2, (out, err)
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert SECRET not in out + err
    assert _tree(tmp_path) == before  # not a folder, not a file
    assert _created_by(p.pid, since) == []
    return err.strip()


def test_a_host_folder_named_as_the_runs_input_dir_is_never_read(recorded, tmp_path, bait):
    run = _copy(recorded, tmp_path)
    _edit(run, lambda t: t["task"].update(input_dir=str(bait)))
    for cmd in (["replay", str(run)], ["fork", str(run), "--step", "1", "--branches", "1", "--base-url",
                                        recorded[1].url]):
        line = refused(tmp_path, *cmd)
        assert f"host folder {bait}" in line and "pass --input-dir" in line
    # given on the command line, the folder is the user's choice
    r = cli("replay", str(run), "--input-dir", str(bait), "--until", "1", "-q")
    assert r.returncode == 0, r.stderr


def test_inputs_that_are_links_out_of_the_run_folder_are_not_followed(recorded, tmp_path, bait):
    run = _copy(recorded, tmp_path)
    kept = run / "inputs/notes/a.txt"
    kept.unlink()
    kept.symlink_to(bait / "id_rsa")  # the file itself
    line = refused(tmp_path, "replay", str(run))
    assert f"{kept} is a symbolic link" in line
    line = refused(tmp_path, "fork", str(run), "--step", "1", "--branches", "1", "--base-url", recorded[1].url)
    assert f"{kept} is a symbolic link" in line

    shutil.rmtree(run / "inputs/notes")
    (bait / "a.txt").write_text(SECRET)
    (run / "inputs/notes").symlink_to(bait)  # a folder on the way
    assert f"{run / 'inputs/notes'} is a symbolic link" in refused(tmp_path, "replay", str(run))
    shutil.rmtree(run / "inputs")
    (run / "inputs").symlink_to(bait)  # inputs/ itself
    assert f"{run / 'inputs'} is a symbolic link" in refused(tmp_path, "replay", str(run))
    (run / "inputs").unlink()
    (run / "inputs/notes").mkdir(parents=True)
    os.mkfifo(run / "inputs/notes/a.txt")  # not a file: never opened (a FIFO would block a reader)
    assert "special file" in refused(tmp_path, "replay", str(run), timeout=60)


def test_a_trajectory_that_is_a_link_or_not_a_file_is_refused(recorded, tmp_path, bait):
    run = _copy(recorded, tmp_path)
    (bait / "trajectory.json").write_bytes((run / "trajectory.json").read_bytes())
    (run / "trajectory.json").unlink()
    (run / "trajectory.json").symlink_to(bait / "trajectory.json")
    assert f"{run / 'trajectory.json'} is a symbolic link" in refused(tmp_path, "replay", str(run))
    assert "symbolic link" in refused(tmp_path, "fork", str(run), "--step", "1", "--base-url", recorded[1].url)
    (run / "trajectory.json").unlink()
    os.mkfifo(run / "trajectory.json")
    assert "special file" in refused(tmp_path, "replay", str(run), timeout=60)
    # the run folder itself a link to a folder elsewhere: refused as well
    (run / "trajectory.json").unlink()
    shutil.copy(bait / "trajectory.json", run / "trajectory.json")
    (tmp_path / "link").symlink_to(run)
    assert "is a symbolic link" in refused(tmp_path, "replay", str(tmp_path / "link"))


def test_an_old_benchmark_sample_reads_its_bench_json_only_when_it_is_a_plain_file(recorded, tmp_path, bait):
    sample = tmp_path / "b/samples/sandbox/q1/r0"
    sample.parent.mkdir(parents=True)
    shutil.copytree(recorded[0], sample, symlinks=True)

    def old(t):  # as a run made before the sandbox folders were recorded
        t["task"].pop("sandbox_dirs", None)
        t["task"]["prompt_config"] = "given by the caller"
    _edit(sample, old)
    (bait / "bench.json").write_text(json.dumps({"task": {"output_dir": "/etc", "working_dir": "/root"}}))
    (tmp_path / "b/bench.json").symlink_to(bait / "bench.json")
    assert f"{tmp_path / 'b/bench.json'} is a symbolic link" in refused(tmp_path, "replay", str(sample))

    (tmp_path / "b/bench.json").unlink()
    (tmp_path / "b/bench.json").write_text(json.dumps({"task": {"output_dir": "/testbed/output"}}))
    r = cli("replay", str(sample), "--until", "1")
    assert r.returncode == 0 and "note:" not in r.stdout, r.stdout + r.stderr
    (tmp_path / "b/bench.json").unlink()
    r = cli("replay", str(sample), "--until", "1")
    assert r.returncode == 0 and "(given by the caller) is not read" in r.stdout, r.stdout + r.stderr


def test_a_prompt_config_the_run_names_on_the_host_is_never_read(recorded, tmp_path, bait):
    run = _copy(recorded, tmp_path)
    # read, it would move the sandbox's input folder and step 1's `cat` would differ
    (bait / "prompt.yaml").write_text("system_prompt: s\ninstance_prompt: i\ninput_dir: /tmp/elsewhere\n")

    def old(t):
        t["task"].pop("sandbox_dirs", None)
        t["task"]["prompt_config"] = str(bait / "prompt.yaml")
    _edit(run, old)
    r = cli("replay", str(run), "--until", "1")
    assert r.returncode == 0 and f"({bait / 'prompt.yaml'}) is not read" in r.stdout, r.stdout + r.stderr
    assert "1 identical, 0 differ" in r.stdout

    _edit(run, lambda t: t["task"].update(sandbox_dirs={"working_dir": "/testbed", "input_dir": "/testbed/input",
                                                        "output_dir": "../../etc"}))
    assert "must be absolute paths without '..'" in refused(tmp_path, "replay", str(run))


def test_host_network_and_capabilities_are_granted_only_on_the_command_line(recorded, tmp_path):
    run = _copy(recorded, tmp_path)
    caps = ["SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE"]
    _edit(run, lambda t: t["config"].update(network="host", cap_add=caps))
    line = refused(tmp_path, "replay", str(run))
    assert "--network host --cap-add SYS_ADMIN --cap-add NET_ADMIN --cap-add SYS_PTRACE" in line
    assert "pass the same options" in line
    refused(tmp_path, "fork", str(run), "--step", "1", "--base-url", recorded[1].url)
    # a part of it given is not all of it: the rest is still refused
    assert "--cap-add SYS_ADMIN" in refused(tmp_path, "replay", str(run), "--network", "host")

    grant = ["--network", "host", *[x for c in caps for x in ("--cap-add", c)]]
    r = cli("replay", str(run), *grant, "--out", str(tmp_path / "report.json"))
    assert r.returncode == 0, r.stderr
    assert ("granted from the command line: --network host, --cap-add SYS_ADMIN --cap-add NET_ADMIN "
            "--cap-add SYS_PTRACE") in r.stderr
    mount = json.loads((tmp_path / "report.json").read_text())["comparisons"][1]
    assert mount["status"] == "differs" and "+MOUNTED" in mount["diff"]  # recorded without the capability
    # and without the grant the same call cannot mount: the recorded settings were not applied
    _edit(run, lambda t: t["config"].update(network="bridge", cap_add=[]))
    r = cli("replay", str(run), "--out", str(tmp_path / "report.json"))
    assert r.returncode == 0 and "granted" not in r.stderr, r.stderr
    assert json.loads((tmp_path / "report.json").read_text())["comparisons"][1]["status"] == "same"


def test_runtime_image_and_looser_limits_are_granted_only_on_the_command_line(recorded, tmp_path, docker_image):
    run = _copy(recorded, tmp_path)
    _edit(run, lambda t: t["config"].update(runtime="runc", image="insandbox-granted:test", memory=None,
                                            pids_limit=None, cpus=None, disk=None, output_max_bytes=None,
                                            output_max_files=10 ** 9))
    line = refused(tmp_path, "replay", str(run))
    for option in ("--image insandbox-granted:test", "--runtime runc", "--memory none", "--cpus 0",
                   "--pids-limit 0", "--disk none", "--max-output-size none", "--max-output-files 1000000000"):
        assert option in line, option
    refused(tmp_path, "fork", str(run), "--step", "1", "--base-url", recorded[1].url)

    subprocess.run(["docker", "tag", docker_image, "insandbox-granted:test"], check=True)
    try:
        r = cli("replay", str(run), "--until", "1", "-q", "--image", "insandbox-granted:test", "--runtime", "runc",
                "--memory", "none", "--cpus", "0", "--pids-limit", "0", "--disk", "none", "--max-output-size",
                "none", "--max-output-files", "0")
    finally:
        subprocess.run(["docker", "rmi", "insandbox-granted:test"], capture_output=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1 steps, 1 calls: 1 identical, 0 differ; first divergence: none"
    assert ("granted from the command line: --image insandbox-granted:test, --runtime runc, --memory none, "
            "--cpus 0, --pids-limit 0, --disk none, --max-output-size none, --max-output-files 0") in r.stderr
    # tighter than the defaults: taken as recorded, nothing to grant
    _edit(run, lambda t: t["config"].update(runtime=None, image="insandbox:latest", memory="1g", pids_limit=256,
                                            cpus=1.0, disk="2g", output_max_bytes=1024, output_max_files=5))
    r = cli("replay", str(run), "--until", "1", "-q")
    assert r.returncode == 0 and "granted" not in r.stderr, r.stderr


def test_a_fork_never_writes_through_a_link_in_the_run_folder(recorded, tmp_path, bait):
    run = _copy(recorded, tmp_path)
    branch = run / "forks/step-1/branch-1"
    branch.mkdir(parents=True)
    (branch / "files").symlink_to(bait)
    args = ["fork", str(run), "--step", "1", "--branches", "1", "--base-url", recorded[1].url]
    assert f"{branch} already exists and is not empty" in refused(tmp_path, *args)
    shutil.rmtree(branch)
    empty = tmp_path / "empty"
    empty.mkdir()
    branch.symlink_to(empty)  # even to an empty folder: a link
    assert f"{branch} is a symbolic link" in refused(tmp_path, *args)
    shutil.rmtree(run / "forks")
    (run / "forks").symlink_to(bait)
    assert f"{run / 'forks'} is a symbolic link" in refused(tmp_path, *args)
    assert sorted(p.name for p in bait.iterdir()) == ["id_rsa"] and not list(empty.iterdir())

    # the same fork into real folders: the branch's output lands in its own new files/
    (run / "forks").unlink()
    (run / "forks/step-1/branch-1").mkdir(parents=True)  # an empty folder is fine
    srv = ScriptedServer(BRANCH).start()
    try:
        r = cli("fork", str(run), "--step", "1", "--branches", "1", "--base-url", srv.url, "--json")
    finally:
        srv.stop()
    assert r.returncode == 0, r.stderr
    assert (branch / "files/b.txt").read_text() == "branch\n"
    assert (branch / "inputs/notes/a.txt").read_text() == "alpha\n"
    assert not (branch / "files").is_symlink()


def test_an_image_name_that_is_not_one_is_refused_before_anything_starts(recorded, tmp_path):
    run = _copy(recorded, tmp_path)
    bad = "../../etc/passwd"
    _edit(run, lambda t: t["config"].update(image=bad))
    assert f"--image: {bad!r} is not an image name" in refused(tmp_path, "replay", str(run))
    assert "is not an image name" in refused(tmp_path, "fork", str(run), "--step", "1", "--base-url",
                                             recorded[1].url)
    r = cli("replay", str(run), "--image", "insandbox:latest", "--until", "1", "-q")  # replaced: fine
    assert r.returncode == 0, r.stderr
    good = _copy(recorded, tmp_path / "good")
    for cmd in (["replay", str(good), "--image", bad], ["fork", str(good), "--step", "1", "--image", bad],
                ["run", "x", "--image", bad, "--model", "m", "--base-url", recorded[1].url],
                ["bench", "math", "--image", "Upper/Case:1", "--model", "m", "--base-url", recorded[1].url]):
        assert "is not an image name" in refused(tmp_path, *cmd)


def _this_machines_address() -> str:
    """An address of this machine that is not loopback (where a model server could listen)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: the route picks the source address
            return s.getsockname()[0]
        except OSError:
            return "172.17.0.1"  # the engine's bridge


class Listener:
    """Someone else's server on a port of this machine: it keeps every byte a connection sends it (the
    request line and every header: Authorization, x-api-key, anything) and answers 400, which a model
    client does not retry."""

    def __init__(self, host: str = "127.0.0.1"):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}/v1"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                data = b""
                try:
                    while b"\r\n\r\n" not in data and len(data) < 1 << 20:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 2\r\nConnection: close\r\n\r\n{}")
                except OSError:
                    pass
                self.received.append(data)

    def close(self) -> None:
        self.sock.close()


# every credential the model clients could find in the environment: ours, the SDKs' own, extra headers
CREDENTIALS = {"INSANDBOX_API_KEY": "sk-insandbox-9f2c", "OPENAI_API_KEY": "sk-openai-4e1a",
               "ANTHROPIC_API_KEY": "sk-ant-7b3d", "ANTHROPIC_AUTH_TOKEN": "ant-token-51c0",
               "OPENAI_ORG_ID": "org-secret-88aa", "OPENAI_PROJECT_ID": "proj-secret-02fe",
               "OPENAI_CUSTOM_HEADERS": "X-Gateway-Key: gw-openai-6d6d",
               "ANTHROPIC_CUSTOM_HEADERS": "X-Gateway-Key: gw-ant-3c3c"}


def test_a_fork_sends_nothing_to_a_model_server_the_run_folder_names_even_on_loopback(recorded, tmp_path,
                                                                                        monkeypatch):
    """Another user listens on a port of this machine that a crafted folder names (or that an honest one
    recorded and someone took since): with every credential set in the environment, a fork without
    --base-url never connects there, whatever the provider, --model or --api-key. Named with --base-url,
    the same listener gets the key: it would have seen one."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    listener = Listener()
    remote = ScriptedServer(BRANCH, host="0.0.0.0").start()  # noqa: S104 - a server elsewhere
    run = _copy(recorded, tmp_path)
    try:
        urls = [listener.url(), listener.url("localhost"), f"http://user:***@127.0.0.1:{listener.port}/v1",
                f"http://{_this_machines_address()}:{remote.httpd.server_address[1]}/v1",
                "https://models.example.com/v1"]
        for url in urls:
            for provider, model in (("openai", "scripted"), ("anthropic", "anthropic/claude-x")):
                _edit(run, lambda t, url=url, p=provider, m=model: t["config"].update(base_url=url, provider=p,
                                                                                     model=m))
                for extra in ([], ["--model", "other"], ["--api-key", "sk-given-on-the-line"]):
                    line = refused(tmp_path, "fork", str(run), "--step", "1", "--branches", "1", *extra)
                    assert "pass --base-url" in line and not any(v in line for v in CREDENTIALS.values()), line
        assert listener.received == [] and remote.requests == []  # not a connection, let alone a key

        # the same listener named on the command line: the key goes where the user said
        for provider, model, path in (("openai", "m", b"/chat/completions"),
                                      ("anthropic", "anthropic/claude-x", b"/messages")):
            listener.received.clear()
            r = cli("fork", str(run), "--step", "1", "--branches", "1", "-q", "--base-url", listener.url(),
                    "--provider", provider, "--model", model, "--out", str(tmp_path / provider))
            assert r.returncode == 1, r.stderr  # the branch failed on the 400, as it should
            sent = [req for req in listener.received if path in req.split(b"\r\n", 1)[0]]
            assert sent and all(b"sk-insandbox-9f2c" in req for req in sent), (provider, listener.received)

        # nor does the folder decide what is spent there: another model in extra_body, many replies, more steps
        _edit(run, lambda t: t["config"].update(provider="openai", extra_body={"model": "o1-pro", "n": 64},
                                                max_steps=100_000))
        mine = remote.url.replace("0.0.0.0", "127.0.0.1")
        line = refused(tmp_path, "fork", str(run), "--step", "1", "--branches", "1", "--base-url", mine)
        assert """--extra-body '{"model": "o1-pro", "n": 64}' --max-steps 100000;""" in line
        assert remote.requests == []
        r = cli("fork", str(run), "--step", "1", "--branches", "1", "-q", "--base-url", mine, "--extra-body", "{}",
                "--max-steps", "5", "--out", str(tmp_path / "granted"))
        assert r.returncode == 0, r.stderr
        assert remote.requests and all("n" not in q["params"] and q["params"].get("model") != "o1-pro"
                                       for q in remote.requests), remote.requests
    finally:
        listener.close()
        remote.stop()


def test_a_run_folder_never_chooses_the_sandbox_backend(recorded, tmp_path):
    """The backend is this machine's choice: a recorded one (here a name no registry knows, as a hostile
    folder might carry to reach a backend of its choosing) is dropped, and the replay runs where it is told."""
    run = _copy(recorded, tmp_path)
    _edit(run, lambda t: t["config"].update(backend="attacker-backend"))
    r = cli("replay", str(run), "--until", "1", "-q")
    assert r.returncode == 0 and "differ" in r.stdout and "attacker-backend" not in r.stderr, (r.stdout, r.stderr)
