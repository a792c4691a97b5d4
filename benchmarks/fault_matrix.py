"""Every abuse and fault case a sandbox must contain or survive, run for real, as one table.

    .venv/bin/python benchmarks/fault_matrix.py [--only SUBSTRING] [--markdown]

Each row runs its case against the real engine (and, for the loop, the scripted model server
over HTTP) and prints what was expected, what was observed and whether that passed. Cases
whose setup is a test of its own (a Docker daemon restart, a full disk, model-server faults,
a killed benchmark) run that test. Exit status 1 when a row fails.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from insandbox import arun
from insandbox.models.scripted_server import ScriptedServer
from insandbox.sandbox import SandboxLimits, SandboxSpec, create_sandbox
from insandbox.sandbox.docker import process_start
from insandbox.tools import ToolBox, ToolCall, default_tools

REPO = Path(__file__).resolve().parents[1]
IMAGE = "insandbox:latest"
SECRET = "sk-matrix-secret-0123456789"
Row = tuple[str, str, str, bool]
CASES: list[tuple[str, str, Callable[[], Awaitable[tuple[str, bool]]]]] = []


def case(name: str, expected: str):
    def register(fn):
        CASES.append((name, expected, fn))
        return fn
    return register


class Sandbox:
    """A started sandbox for one case, removed afterwards."""

    def __init__(self, **limits):
        self.sb = create_sandbox(SandboxSpec(image=IMAGE, limits=SandboxLimits(**limits), run_id="fault-matrix"))

    async def __aenter__(self):
        await self.sb.start()
        return self.sb

    async def __aexit__(self, *exc):
        await self.sb.close()


async def survivors(sb, pattern: str) -> int:
    r = await sb.run(f"for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done "
                     f"| grep -E '{pattern}' | grep -cv grep")
    return int(r.output.split()[-1])


# ---------------------------------------------------------------------------------- limits
@case("disk filled past the limit", "write fails inside (ENOSPC/EDQUOT), host unaffected, sandbox lives")
async def disk_limit():
    async with Sandbox(disk="1g") as sb:
        r = await sb.run("dd if=/dev/zero of=/tmp/fill bs=1M count=3000 2>&1 | grep -E 'space|quota'; "
                         "du -sm /tmp/fill | cut -f1", timeout=120)
        mb = int(r.output.split()[-1])
        alive = (await sb.run("rm /tmp/fill; echo alive")).output.strip() == "alive"
        return f"stopped at {mb} MB of 1 GB: {r.output.splitlines()[0][:60]}; alive={alive}", mb <= 1024 and alive


@case("mknod, raw sockets, setuid", "refused: capabilities dropped, no-new-privileges")
async def capabilities():
    async with Sandbox() as sb:
        r = await sb.run("mknod /tmp/d b 8 0 2>&1 | tail -c 30; grep NoNewPrivs /proc/self/status; "
                         "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)' 2>&1 "
                         "| tail -1")
        ok = r.output.count("not permitted") == 2 and "NoNewPrivs:\t1" in r.output
        return " | ".join(x.strip() for x in r.output.splitlines() if x.strip())[:110], ok


@case("fork bomb", "held at the pids limit (1024); the sandbox still answers; host unaffected")
async def fork_bomb():
    from insandbox.sandbox.docker import engine

    async with Sandbox() as sb:
        await sb.run(":(){ :|:& };: 2>/dev/null")
        await asyncio.sleep(5)
        pids = engine.api().stats(sb.container_id, stream=False).get("pids_stats", {}).get("current")
        after = await sb.run("echo alive")
        host = subprocess.run(["true"]).returncode == 0
        return f"{pids} processes in the sandbox; then: {after.output.strip()}; host forks: {host}", \
            after.output.strip() == "alive" and pids is not None and pids <= 1024 and host


@case("memory bomb", "the model is told 'killed: out of memory'; the sandbox lives")
async def memory_bomb():
    box = ToolBox(default_tools())
    async with Sandbox(memory="256m") as sb:
        out, _ = await box.call(sb, ToolCall("c", "execute_bash", json.dumps(
            {"command": "python3 -c 'a = [bytearray(1 << 20) for _ in range(100000)]'"})))
        after = await sb.run("echo alive")
        told = "killed: out of memory" in out.text
        return f"told={told}; exit 137={'[exit code: 137]' in out.text}; then: {after.output.strip()}", \
            told and after.output.strip() == "alive"


@case("20 MB on one line", "cut in the middle; the observation stays small")
async def long_line():
    async with Sandbox() as sb:
        r = await sb.run("python3 -c \"print('x' * 20_000_000)\"")
        size = len(r.output) + len(r.output_tail)
        return f"{r.total_chars:,} chars produced, {size:,} kept", r.total_chars > 19_000_000 and size <= 16_000


@case("infinite output", "killed at the timeout; the observation stays small")
async def infinite_output():
    async with Sandbox() as sb:
        r = await sb.run("yes", timeout=3)
        size = len(r.output) + len(r.output_tail)
        return f"timed_out={r.timed_out}, {r.total_bytes / 1e6:,.0f} MB produced, {size:,} chars kept", \
            r.timed_out and size <= 16_000


@case("binary output (5 MB of /dev/urandom)", "no NUL or control bytes reach the model; it is told")
async def binary_output():
    box = ToolBox(default_tools())
    async with Sandbox() as sb:
        out, _ = await box.call(sb, ToolCall("c", "execute_bash", json.dumps({"command": "head -c 5M /dev/urandom"})))
        bad = sum(1 for ch in out.text if ord(ch) < 32 and ch not in "\t\n\r")
        return f"{bad} control chars in the observation; told={'not text' in out.text}", bad == 0


@case("SIGTERM-ignoring process", "killed at the timeout with everything it started")
async def ignores_sigterm():
    async with Sandbox() as sb:
        r = await sb.run("trap '' TERM; python3 -c 'import signal, time; signal.signal(signal.SIGTERM, "
                         "signal.SIG_IGN); time.sleep(1000)' & sleep 1000", timeout=2)
        left = await survivors(sb, "time.sleep|sleep 1000")
        return f"timed_out={r.timed_out}, {left} left", r.timed_out and left == 0


@case("double fork + setsid + env -i", "a timed-out command leaves no process")
async def detached():
    async with Sandbox() as sb:
        await sb.run("(env -i sleep 301 &)")
        r = await sb.run("(setsid env -i sleep 1000 &); (env -i setsid bash -c 'exec -a hidden sleep 1000' &); "
                         "sleep 1000", timeout=2)
        left, kept = await survivors(sb, "sleep 1000|hidden"), await survivors(sb, "sleep 301")
        return f"timed_out={r.timed_out}, {left} left; earlier job kept={kept == 1}", left == 0 and kept == 1


@case("exec 1>&- 2>&-", "the shell's output is restored; the next command is heard")
async def closed_streams():
    async with Sandbox() as sb:
        r = await sb.run("exec 1>&- 2>&-")
        after = await sb.run("echo heard")
        return f"restored={r.streams_restored}; next: {after.output.strip()!r}", after.output.strip() == "heard"


@case("kill -9 1, pkill python3", "the sandbox's server survives")
async def kill_server():
    async with Sandbox() as sb:
        await sb.run("kill -9 1; kill -TERM 1; pkill -9 python3; true")
        after = await sb.run("echo alive")
        return after.output.strip(), after.output.strip() == "alive"


@case("host keys in /proc/1/environ and env", "not there: the sandbox never gets the host's environment")
async def host_keys():
    os.environ["OPENAI_API_KEY"] = SECRET
    async with Sandbox() as sb:
        r = await sb.run("cat /proc/1/environ /proc/self/environ | tr '\\0' '\\n'; env; grep -rs sk-matrix /run /tmp")
        return f"secret found={SECRET in r.output}", SECRET not in r.output


@case("Docker socket", "not reachable from the sandbox")
async def docker_socket():
    async with Sandbox() as sb:
        r = await sb.run("ls -la /var/run/docker.sock /run/docker.sock 2>&1 | head -2; "
                         "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); "
                         "s.connect('/var/run/docker.sock')\" 2>&1 | tail -1")
        return r.output.strip().splitlines()[-1][:90], "No such file" in r.output


async def _loopback(network: str) -> tuple[str, bool]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    try:
        async with Sandbox(network=network) as sb:
            gw = (await sb.run("ip route 2>/dev/null | awk '/default/ {print $3}'")).output.strip() or "172.17.0.1"
            code = ("import socket,sys\nfor h in sys.argv[1:]:\n    try:\n"
                    f"        socket.create_connection((h, {port}), timeout=3); print(h, 'REACHED')\n"
                    "    except OSError as e: print(h, 'refused', type(e).__name__)\n")
            await sb.write_file("/tmp/probe.py", code.encode())
            r = await sb.run(f"python3 /tmp/probe.py 127.0.0.1 {gw} host.docker.internal")
            return "; ".join(r.output.strip().splitlines())[:110], "REACHED" not in r.output
    finally:
        srv.close()


@case("host loopback service, --network bridge", "unreachable")
async def loopback_bridge():
    return await _loopback("bridge")


@case("host loopback service, --network none", "unreachable")
async def loopback_none():
    return await _loopback("none")


@case("host loopback service, --network registries", "unreachable")
async def loopback_registries():
    return await _loopback("registries")


@case("--network registries: PyPI and anything else", "pip install works; any other host is refused by the proxy")
async def registries_only():
    async with Sandbox(network="registries") as sb:
        pip = await sb.run("pip install -q --no-deps --no-cache-dir six 2>&1 | grep -v WARNING; "
                           "python3 -c 'import six; print(\"six ok\")'", timeout=180)
        other = await sb.run("python3 -c \"import urllib.request as u; u.urlopen('https://example.com', "
                             "timeout=10)\" 2>&1 | tail -1")
        ok = "six ok" in pip.output and ("403" in other.output or "Filtered" in other.output)
        return f"pip: {pip.output.strip().splitlines()[-1][:30]}; example.com: {other.output.strip()[:70]}", ok


@case("copy-back of a symlink, a FIFO, a hard link", "link not followed, FIFO skipped, hard link copied")
async def copy_back():
    with tempfile.TemporaryDirectory() as host:
        async with Sandbox() as sb:
            await sb.run("cd /testbed && mkdir -p output && cd output && echo data > real.txt && "
                         "ln -s /etc/shadow shadow && mkfifo pipe && ln real.txt twin.txt")
            res = await sb.copy_out("/testbed/output", Path(host))
        got = sorted(res.files)
        leaked = (Path(host) / "shadow").exists() and "root:" in (Path(host) / "shadow").read_text(errors="replace")
        fifo = (Path(host) / "pipe").exists()
        return f"copied {got}; skipped {sorted(s.path for s in res.skipped)}", \
            "twin.txt" in got and not leaked and not fifo


# ---------------------------------------------------------------------------------- the loop
def _scripted(turns: list[dict]) -> ScriptedServer:
    return ScriptedServer({"turns": turns}).start()


def bash(cmd: str) -> dict:
    return {"tool": "execute_bash", "args": {"command": cmd}}


@case("malformed tool calls", "each a tool error the model reads; the run goes on to submit")
async def malformed_calls():
    srv = _scripted([{"tool": "execute_bash", "args": '{"command": "echo broken'}, {"tool": "no_such_tool"},
                     {"tool": "execute_bash", "args": {"cmd": "wrong key"}}, {"tool": "str_replace_editor",
                                                                               "args": {"command": "explode"}},
                     bash("echo 1 > /testbed/answer.txt"), {"tool": "submit"}])
    try:
        with tempfile.TemporaryDirectory() as out:
            res = await arun("x", model="m", base_url=srv.url, output_dir=Path(out), image=IMAGE)
        steps = res.trajectory.steps
        errors = sum(1 for s in steps for c in s.tool_calls if c.error) + sum(1 for s in steps if s.nudged)
        return f"exit={res.exit_reason}, {errors} tool errors or reminders", \
            res.exit_reason == "submitted" and errors >= 4
    finally:
        srv.stop()


@case("the sandbox is OOM-killed (its server first)", "run ends sandbox_error; outputs kept")
async def sandbox_oom():
    many = "for i in $(seq 40); do python3 -c 'import time; a = b\"x\" * (12 << 20); time.sleep(60)' & done; wait"
    srv = _scripted([bash("echo kept > /testbed/output/part.txt; echo 1000 > /proc/1/oom_score_adj; " + many),
                     {"tool": "submit"}])
    try:
        with tempfile.TemporaryDirectory() as out:
            res = await arun("x", model="m", base_url=srv.url, output_dir=Path(out), image=IMAGE, memory="256m")
        t = res.trajectory
        return f"exit={t.exit_reason} ({t.exit_detail[:50]}), files={res.files}", \
            t.exit_reason == "sandbox_error" and res.files == ["part.txt"]
    finally:
        srv.stop()


async def _signal_host(sig: int) -> tuple[str, bool]:
    srv = _scripted([bash("echo started"), bash("sleep 600")])
    exe = Path(sys.executable).parent / "insandbox"
    try:
        with tempfile.TemporaryDirectory() as out:
            proc = subprocess.Popen([str(exe), "run", "x", "--model", "m", "--base-url", srv.url, "--out",
                                     out, "--image", IMAGE, "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            owner = f"insandbox.owner={socket.gethostname()}:{proc.pid}:{process_start(proc.pid)}"
            deadline = time.time() + 60
            while len(srv.requests) < 2 and time.time() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)
            proc.send_signal(sig)
            proc.communicate(timeout=30)
            traj = Path(out, "trajectory.json")
            reason = json.loads(traj.read_text())["exit_reason"] if traj.exists() else "no trajectory"

        def containers(*flags: str) -> list[str]:
            return subprocess.run(["docker", "ps", "-q", *flags, "--filter", f"label={owner}"], capture_output=True,
                                  text=True).stdout.split()

        deadline = time.time() + 10
        while containers() and time.time() < deadline:
            time.sleep(0.2)
        running, stopped = containers(), containers("-a")
        if sig == signal.SIGKILL:  # nothing could be saved; the container must stop by itself
            subprocess.run([str(exe), "clean"], capture_output=True)
            return f"rc={proc.returncode}; its sandbox running: {len(running)}, stopped: {len(stopped)}, after " \
                   f"`insandbox clean`: {len(containers('-a'))}", not running and not containers("-a")
        return f"rc={proc.returncode}, exit={reason}, containers left={len(stopped)}", \
            proc.returncode == 128 + sig and reason == "interrupted" and not stopped
    finally:
        srv.stop()


@case("SIGINT of `insandbox run`", "exit 130, trajectory saved as interrupted, container removed")
async def host_sigint():
    return await _signal_host(signal.SIGINT)


@case("SIGTERM of `insandbox run`", "exit 143, trajectory saved as interrupted, container removed")
async def host_sigterm():
    return await _signal_host(signal.SIGTERM)


@case("SIGKILL of `insandbox run`", "its sandbox stops by itself (stdin EOF); `insandbox clean` removes it")
async def host_sigkill():
    return await _signal_host(signal.SIGKILL)


# ---------------------------------------------------------------------------------- tests as rows
MODEL = "tests/models/test_server_faults.py::"
BENCH = "tests/bench/test_faults.py::"
VIEWER = "tests/viewer/test_hostile.py::"
ISOLATION = "tests/sandbox/test_isolation.py::"
NETWORK = "tests/sandbox/test_network.py::"
RUN_FOLDER = "tests/replay/test_run_folder_is_data.py::"
HOST_VIEW = "tests/sandbox/test_hostview.py::"
RESET_CHECK = "tests/sandbox/test_resetcheck.py::"
HOSTILE = "tests/agent/test_hostile_replies.py::"
POLICY = "tests/rl/rollout/test_hostile_policy.py::"
TEST_ROWS: list[tuple[str, str, str]] = [  # (case, expected, pytest node id or file)
    ("a leader that exits alone (state Z) while its thread rewrites the answer, then a reset",
     "killed; the next sample grades its own answer", RESET_CHECK + "test_a_process_that_looks_dead_does_not_reach_"
     "the_next_sample"),
    ("a server that looks away at a reset (its kill does nothing)", "the host finds the processes in the cgroup and "
     "kills them; one it cannot kill costs the container", RESET_CHECK + "test_the_host_kills_what_a_blind_server_"
     "leaves"),
    ("a server that says its settings are back when they are not", "the host compares /proc/1 with the start: not "
     "reused", RESET_CHECK + "test_settings_a_blind_server_keeps_are_found_by_the_host"),
    ("a timed-out command whose leader exits alone", "killed, seen gone from the host; the model is told 'killed' "
     "only then", HOST_VIEW + "test_a_timed_out_command_is_checked_and_finished_from_the_host"),
    ("a timed-out command, a server that does not kill", "the host kills what the command started; an earlier job "
     "lives on", HOST_VIEW + "test_the_host_finishes_what_the_server_missed_after_a_timeout"),
    ("restored copies of touched image files (--disk 500m)", "a container that would offer less disk than a fresh "
     "one is not reused", RESET_CHECK + "test_restored_copies_never_shrink_the_next_samples_disk"),
    ("covert channels: /dev times, PID 1's core dump filter, TIME_WAIT sockets", "the next sample sees what a fresh "
     "sandbox shows", RESET_CHECK + "test_covert_channels_are_reset"),
    ("System V IPC a server says it removed", "read from the host in the sandbox's IPC namespace: not reused",
     RESET_CHECK + "test_ipc_a_blind_server_leaves_is_found_by_the_host"),
    ("a fork bomb left running, a server that does not kill", "frozen and killed from the host; the next sample has "
     "server and shell only", RESET_CHECK + "test_a_fork_bomb_a_blind_server_leaves_is_frozen_and_killed_from_the_"
     "host"),
    ("copy-back: 100,000 folders, links and FIFOs", "at most --max-output-files entries of any kind on the host",
     "tests/sandbox/test_copyback.py::test_folders_links_and_fifos_count_against_the_entry_limit"),
    ("copy-back: 30,000 long paths", "the listing stops at 4 MiB; the record of what stayed behind is bounded",
     "tests/sandbox/test_copyback.py::test_long_paths_stop_at_the_listing_bound"),
    ("copy-back: a server reply past what the host asked for", "refused as it arrives; the copy goes the engine's "
     "way", "tests/sandbox/test_copyback.py::test_a_listing_past_the_asked_bound_is_refused"),
    ("bwrap: the host user's keyrings (Kerberos, AFS tokens)", "out of reach: a keyring holding nothing, keyctl "
     "denied by the seccomp filter the host checks", "tests/sandbox/bwrap/test_isolation.py::test_the_host_users_"
     "keyrings_are_out_of_reach_as_root"),
    ("bwrap: 768 MiB of shared mappings under --memory 64m", "stopped by the sandbox's cgroup; the host counts the "
     "OOM kill", "tests/sandbox/bwrap/test_isolation.py::test_memory_past_the_limit_through_shared_mappings_is_"
     "stopped_and_the_host_sees_it"),
    ("bwrap: a sandbox started without the seccomp filter", "refused by the host (/proc/<pid>/status)",
     "tests/sandbox/bwrap/test_isolation.py::test_the_host_refuses_a_sandbox_without_the_filter"),
    ("bwrap: /sys/class/net, /proc/keys, host paths in mountinfo", "no host interface, masks empty, no host path",
     "tests/sandbox/bwrap/test_isolation.py::test_the_hosts_interfaces_paths_and_kernel_internals_are_out_of_sight"),
    ("sandboxes of Docker, Podman and bwrap side by side", "no TCP or UDP from any to any other, nor from this "
     "machine", "tests/sandbox/test_podman.py::test_sandboxes_of_docker_podman_and_bwrap_never_reach_each_other"),
    ("the registries proxy reached at its egress address", "refused: it serves its internal network only",
     NETWORK + "test_the_registries_proxy_serves_its_sandboxes_only"),
    ("fork: a run folder names a loopback model server", "nothing sent, no key: --base-url must name it",
     RUN_FOLDER + "test_a_fork_sends_nothing_to_a_model_server_the_run_folder_names_even_on_loopback"),
    ("replay and fork: nested, mistyped, truncated trajectory.json", "exit 2, one line, never a traceback",
     "tests/replay/test_malformed_folders.py"),
    ("replay: a trajectory.json of tiny values", "refused within 12 times its size + 256 MiB of memory",
     "tests/runs/test_trajectory_budget.py::test_a_file_of_tiny_values_is_refused_before_this_process_spends_"
     "anything"),
    ("a model breaks its sandbox on the items it gets wrong (OOM score, CPU and file limits, copy-back)",
     "each scored 0, never retried: no more than the honest 20%", "tests/bench/test_attribution.py"),
    ("RL: PID 1's CPU or file limit lowered", "the sandbox's doing: trained on at the broken-sandbox penalty",
     "tests/rl/rollout/test_runner.py::test_every_way_of_breaking_the_sandbox_is_the_models"),
    ("RL: an honest rollout killed through the engine after a child's OOM kill", "the kill event decides: masked",
     "tests/rl/rollout/test_runner.py::test_a_kill_from_outside_is_masked_even_after_an_oom_kill"),
    ("sandboxes fork-bombing together against kernel.pid_max", "admitted only while all at their process limits "
     "fit; one bigger than the host refused in one line", "tests/sandbox/test_admission.py::test_sandboxes_are_"
     "admitted_at_their_process_limits"),
    ("PID 1: ptrace, /proc/1/mem, its pipes and environment", "denied to every process of the sandbox (the "
     "server is non-dumpable)", ISOLATION + "test_the_server_is_out_of_the_samples_reach"),
    ("pool isolation: PID 1's limits, affinity, priority, OOM score", "put back before the next sample, or the "
     "container discarded (a lowered hard limit, a raised nice)", ISOLATION + "test_the_servers_settings_never_reach_"
     "the_next_sample"),
    ("pool isolation: /dev, /dev/shm, mqueue, /sys/fs/cgroup, System V IPC of another user", "the next sample sees "
     "them as in a fresh sandbox; a deleted device node discards the container",
     ISOLATION + "test_in_memory_mounts_and_ipc_come_back_clean"),
    ("pool isolation: xattrs, ACLs, inode flags, mode and owner of /", "restored (the manifest compares them)",
     ISOLATION + "test_image_metadata_comes_back"),
    ("pool isolation: --cap-add", "the container serves one sample only",
     ISOLATION + "test_capabilities_given_back_make_a_container_single_use"),
    ("disk via engine files and logs (--disk 200m)", "/etc files read-only, no container log: the host loses less "
     "than the limit + 100 MB", ISOLATION + "test_a_sandbox_cannot_make_the_host_store_more_than_its_disk_limit"),
    ("sandbox to sandbox (bridge, registries)", "no TCP, UDP, broadcast or DNS name between two sandboxes",
     NETWORK + "test_sandboxes_cannot_reach_each_other"),
    ("registries proxy starvation (700 half-sent connections)", "the hog holds at most 32; the other sandbox is "
     "served", NETWORK + "test_one_sandbox_cannot_starve_the_registries_proxy"),
    ("a timed-out command's children forge the command marker", "all killed; earlier background jobs live on",
     ISOLATION + "test_a_timed_out_command_cannot_hide_its_processes"),
    ("hostile run folder: input_dir names a host folder", "exit 2, one line, nothing read or started",
     RUN_FOLDER + "test_a_host_folder_named_as_the_runs_input_dir_is_never_read"),
    ("hostile run folder: inputs/ and trajectory.json as links", "exit 2, one line; no link followed",
     RUN_FOLDER + "test_inputs_that_are_links_out_of_the_run_folder_are_not_followed"),
    ("hostile run folder: network host, caps, runtime, image, no limits", "refused unless given on the command line "
     "(then shown)", RUN_FOLDER + "test_host_network_and_capabilities_are_granted_only_on_the_command_line"),
    ("hostile run folder: a fork's branch folder as a link", "exit 2; the host folder untouched",
     RUN_FOLDER + "test_a_fork_never_writes_through_a_link_in_the_run_folder"),
    ("hostile run folder: image ../../etc/passwd", "exit 2, one line, before anything starts",
     RUN_FOLDER + "test_an_image_name_that_is_not_one_is_refused_before_anything_starts"),
    ("an --out prepared with links", "refused before anything starts; outputs never written through links",
     "tests/agent/test_loop.py::test_an_output_folder_prepared_with_links_is_never_written_through"),
    ("a key in --base-url or --extra-body", "sent to the server, stored and printed nowhere",
     "tests/test_credentials.py::test_a_run_sends_the_credentials_and_stores_and_prints_none"),
    ("model server: a 5xx storm", "retried with backoff; the run completes",
     MODEL + "test_a_run_rides_out_a_5xx_storm"),
    ("model server: permanent 5xx", "a clear error naming the tries; run ends model_error, record kept",
     MODEL + "test_the_command_exits_1_with_the_reason_and_keeps_the_record"),
    ("model server: 429 with Retry-After", "the retry waits as asked (seconds or a date)",
     MODEL + "test_429_waits_for_retry_after_in_seconds"),
    ("model server: hung connection", "the request timeout fires, retried, then a clear error",
     MODEL + "test_a_hung_server_times_out_is_retried_then_a_clear_error"),
    ("model server: cut answers", "retried, then a clear error",
     MODEL + "test_a_cut_answer_is_retried_then_a_clear_error"),
    ("model server: garbage bodies", "retried, then an error naming what came back",
     MODEL + "test_a_200_with_garbage_is_retried_then_an_error_naming_what_came_back"),
    ("Docker daemon restarted mid-bench", "cut-off samples recorded as infrastructure failures, rerun once "
     "the engine is back; the run completes", BENCH + "test_a_docker_daemon_restart_mid_bench_is_waited_out_and_the_"
     "run_completes"),
    ("Docker engine gone for good mid-bench", "the wait is bounded; the run stops resumable; --resume finishes",
     BENCH + "test_an_engine_that_does_not_come_back_stops_the_run_and_resume_finishes"),
    ("results disk full mid-bench", "a clear error; records kept whole; --resume finishes once space is freed",
     BENCH + "test_a_full_results_disk_stops_the_run_keeps_the_results_whole_and_resume_finishes"),
    ("bench SIGKILLed half way, then --resume", "one record per sample (the last attempt, with its count), "
     "no duplicates, no container left", BENCH + "test_sigkill_half_way_then_resume_records_each_sample_once_and_"
     "leaves_no_container"),
    ("bench SIGTERM, then SIGINT, then --resume", "each stops cleanly, results kept; --resume finishes",
     BENCH + "test_sigterm_then_sigint_stop_the_bench_cleanly_and_resume_finishes"),
    ("a reply of 1,000 / 100,000 nested brackets, tagged or not, text or native arguments; NaN, a key twice",
     "a tool error or reminder the model reads; never internal_error; the run goes on to submit",
     HOSTILE + "test_deeply_nested_replies_are_the_models_errors_never_insandbox_s"),
    ("an RL policy's turns of nested brackets", "its own mistake: not internal_error, not masked",
     POLICY + "test_nested_turns_are_the_policys_own_never_infrastructure"),
    ("50 tool calls in one reply", "16 run (--max-tool-calls-per-reply); each other one is answered 'not run'",
     HOSTILE + "test_a_reply_of_50_calls_runs_16_and_the_rest_are_told_not_run"),
    ("`sleep 100000` every turn until the time limit", "the model's (exit_cause commands): RL scores it with the "
     "time-limit penalty; a slow model server stays masked", POLICY + "test_stalling_in_its_own_commands_is_"
     "penalised_waiting_on_the_sampler_is_masked"),
    ("a tool output printing the chat template's end of turn and assistant header (RL)", "plain-text ids: only "
     "the template's own special tokens in the environment's tokens",
     POLICY + "test_a_tool_output_that_prints_the_templates_tokens_stays_text"),
    ("model server: empty role chunks streamed forever", "the try stalls after --stall-timeout, is retried",
     "tests/models/test_openai_stream.py::test_empty_chunks_sent_forever_do_not_hold_the_stall_timer"),
    ("verl's critic/score/mean with masked rollouts", "the mean over the rollouts not masked (-0.150, not -0.094)",
     "tests/rl/trainers/test_verl_metrics.py::test_the_logged_score_is_the_mean_over_rollouts_that_are_not_masked"),
    ("viewer: DNS rebinding (a Host that is not the viewer's)", "400 with the page CSP on every route, static files "
     "and event streams included", VIEWER + "test_a_foreign_host_header_is_refused_on_every_route"),
    ("viewer: output names made to break URLs (.%2e, ?, #, \\n, \\, not UTF-8)", "each listed, shown and "
     "downloaded byte for byte in Chromium; no link reaches another run's file",
     VIEWER + "test_hostile_names_in_chromium_open_and_download_their_own_file"),
]


def pytest_row(name: str, expected: str, node: str) -> Row:
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node], cwd=REPO,
                       capture_output=True, text=True)
    last = (p.stdout.strip().splitlines() or ["?"])[-1]
    return name, expected, f"test {node.split('::')[-1][:50]}: {last[:40]} ({time.perf_counter() - t:.0f} s)", \
        p.returncode == 0


async def run_case(name: str, expected: str, fn) -> Row:
    try:
        observed, ok = await fn()
    except Exception as e:  # a crash is an observation too
        observed, ok = f"{type(e).__name__}: {e}"[:110], False
    return name, expected, observed, ok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    rows: list[Row] = []
    for name, expected, fn in CASES:
        if a.only.lower() in name.lower():
            rows.append(asyncio.run(run_case(name, expected, fn)))
            print(("PASS " if rows[-1][3] else "FAIL ") + name, file=sys.stderr)
    for name, expected, node in TEST_ROWS:
        if a.only.lower() in name.lower():
            rows.append(pytest_row(name, expected, node))
            print(("PASS " if rows[-1][3] else "FAIL ") + name, file=sys.stderr)
    if a.markdown:
        print("| case | expected | observed | pass |\n|---|---|---|---|")
        for name, expected, observed, ok in rows:
            print(f"| {name} | {expected} | {observed.replace('|', '/')} | {'yes' if ok else 'NO'} |")
    else:
        for name, expected, observed, ok in rows:
            print(f"{'PASS' if ok else 'FAIL'}  {name}\n      expected: {expected}\n      observed: {observed}")
    print(f"\n{sum(r[3] for r in rows)}/{len(rows)} passed", file=sys.stderr)
    sys.exit(0 if all(r[3] for r in rows) else 1)


if __name__ == "__main__":
    threading.excepthook = lambda args: None  # a scripted server's thread ending with the run is not news
    main()
