"""A Harbor task's verifier, run in the sandbox once the agent is done: what it says is the score.

In order: the agent's reward files are gone (`/logs/verifier` made afresh: a file the agent wrote
itself, before, is never read), `/tests` is uploaded afresh from the task folder (never baked into the
image, so the agent never saw it), `tests/test.sh` runs as a fresh process (not in the agent's shell,
whose functions and aliases the agent chose) with the task's environment variables and user, under
its timeout, its output kept in `/logs/verifier/test-stdout.txt`. Then the reward: `reward.json`
wins over `reward.txt` when both are there, as in Harbor. A missing, empty, non-numeric or
non-finite reward, a verifier that timed out, or one that could not run, is a failed verification:
recorded as such with the reason, never a silent 0.

`environment_mode = "separate"`: the verifier runs in a fresh sandbox started from the agent's final
files (a snapshot: no process of the agent's is carried), which is then removed. In the shared mode
what the agent left running shares the machine with the verifier, as in Harbor.
"""
from __future__ import annotations

import asyncio
import json
import math
import os
import re
import shlex
import time
from dataclasses import dataclass, field
from typing import Optional

from ...sandbox import Sandbox, SandboxError
from ...sandbox.base import FILE
from .task import HarborTask

LOGS = "/logs/verifier"
TESTS = "/tests"
SOLUTION = "/solution"
REWARD_TXT, REWARD_JSON = f"{LOGS}/reward.txt", f"{LOGS}/reward.json"
STDOUT = f"{LOGS}/test-stdout.txt"
MAX_REWARD_BYTES = 64 * 1024
MAX_OUTPUT_KEPT = 8 * 1024  # the end of the verifier's output, kept in the record
KILL_AFTER_S = 5
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass
class Verification:
    """What the verifier said: `reward` (the score) when it said a number, else `error` (why not)."""

    reward: Optional[float] = None
    rewards: dict = field(default_factory=dict)  # every value of reward.json (or {"reward": x} of reward.txt)
    source: Optional[str] = None  # the file the reward came from
    error: Optional[str] = None
    exit_code: Optional[int] = None
    timed_out: bool = False
    separate: bool = False
    duration_s: float = 0.0
    output_tail: str = ""

    def as_dict(self) -> dict:
        return {"reward": self.reward, "rewards": self.rewards, "source": self.source, "error": self.error,
                "exit_code": self.exit_code, "timed_out": self.timed_out, "separate": self.separate,
                "duration_s": round(self.duration_s, 3), "output_tail": self.output_tail}


def environment_of(task: HarborTask, environ=os.environ) -> dict[str, str]:
    """The verifier's variables, `${NAME}` taken from this machine's environment (as Harbor does: an
    LLM judge's key stays out of the task folder). A name that is not set is a failed verification."""
    out = {}
    for key, value in task.verifier.env:
        def sub(m: re.Match) -> str:
            if m.group(1) not in environ:
                raise KeyError(m.group(1))
            return environ[m.group(1)]
        out[key] = _VAR.sub(sub, value)
    return out


def script(task: HarborTask, env: dict[str, str]) -> str:
    """The shell script that runs the verifier: stale rewards gone, test.sh under its timeout (`timeout`
    signals test.sh's whole process group), its exit status printed last."""
    timeout = max(1, math.ceil(task.verifier.timeout_s))
    run = ["timeout", "-k", str(KILL_AFTER_S), str(timeout)]
    if task.verifier.user not in (None, "root", "0"):
        run += ["runuser", "-u", task.verifier.user, "--"]
    run += ["env", *(f"{k}={v}" for k, v in env.items()), "bash", f"{TESTS}/test.sh"]
    return "\n".join([
        f"rm -rf -- {LOGS} && mkdir -p -- {LOGS} && chmod 777 -- {LOGS} || exit 90",
        f"chmod -R a+rX -- {TESTS} 2>/dev/null; cd -- {TESTS} || exit 91",
        f"{shlex.join(run)} > {STDOUT} 2>&1 < /dev/null",
        'echo "exit=$?"',
    ])


async def verify(sandbox: Sandbox, task: HarborTask) -> Verification:
    """Run the task's verifier in `sandbox` (made afresh from its files first when the task says so)."""
    t0 = time.monotonic()
    if not task.verifier.separate:
        result = await _verify_in(sandbox, task)
    else:
        result = await _verify_in_copy(sandbox, task)
    result.duration_s = time.monotonic() - t0
    return result


async def _verify_in_copy(sandbox: Sandbox, task: HarborTask) -> Verification:
    try:
        snap = await sandbox.snapshot()
    except (SandboxError, NotImplementedError) as e:
        return Verification(error=f"could not make a fresh sandbox from the agent's files: {e}", separate=True)
    copy = None
    try:
        copy = await snap.start_copy()
        result = await _verify_in(copy, task)
    except SandboxError as e:
        result = Verification(error=f"the verifier's sandbox failed: {e}")
    finally:
        if copy is not None:
            try:
                await copy.close()
            except SandboxError:
                pass
        await snap.remove()
    result.separate = True
    return result


async def _verify_in(sandbox: Sandbox, task: HarborTask) -> Verification:
    try:
        env = environment_of(task)
    except KeyError as e:
        return Verification(error=f"verifier.env names ${{{e.args[0]}}}, which is not set on this machine")
    await _fresh_folder(sandbox, TESTS)
    await sandbox.copy_in(task.tests_dir, TESTS)
    bound = task.verifier.timeout_s + KILL_AFTER_S + 30
    try:  # the bound held from here too: a sandbox whose tools or server do not end it is not waited on
        res = await asyncio.wait_for(sandbox.exec(["sh", "-c", script(task, env)], timeout=bound), bound + 15)
    except asyncio.TimeoutError:
        return Verification(timed_out=True, error=f"the verifier did not end within {bound:g} s, as this machine "
                                                  "timed it")
    out = Verification(output_tail=await _tail(sandbox, STDOUT))
    status = re.search(r"exit=(\d+)\s*$", res.stdout or "")
    if res.timed_out or status is None:
        out.timed_out = bool(res.timed_out)
        out.error = ("the verifier did not end within its timeout" if res.timed_out else
                     f"the verifier could not run: {(res.stderr or res.stdout or '').strip()[-300:] or 'no output'}")
        return out
    out.exit_code = int(status.group(1))
    if out.exit_code in (90, 91) and not out.output_tail:
        out.error = f"could not prepare {LOGS} or {TESTS} in the sandbox: {(res.stderr or '').strip()[-300:]}"
        return out
    if out.exit_code in (124, 137):  # timeout's own statuses: test.sh was stopped
        out.timed_out = True
        out.error = f"tests/test.sh ran past its timeout ({task.verifier.timeout_s:g} s)"
        return out
    await _read_reward(sandbox, out)
    return out


async def _fresh_folder(sandbox: Sandbox, path: str) -> None:
    res = await sandbox.exec(["sh", "-c", f"rm -rf -- {path} && mkdir -p -- {path}"])
    if res.exit_code != 0:
        raise SandboxError(f"cannot make {path} afresh in the sandbox: {res.stderr.strip()[-300:]}")


async def _tail(sandbox: Sandbox, path: str) -> str:
    res = await sandbox.exec(["tail", "-c", str(MAX_OUTPUT_KEPT), "--", path])
    return res.stdout if res.exit_code == 0 else ""


async def _read_reward(sandbox: Sandbox, out: Verification) -> None:
    """reward.json, else reward.txt (Harbor's order), each a regular file of at most 64 KiB."""
    for path in (REWARD_JSON, REWARD_TXT):
        stat = await sandbox.stat(path)
        if stat is None:
            continue
        out.source = path
        if stat.kind != FILE:
            out.error = f"{path} is a {stat.kind}, not a file"
            return
        if stat.size > MAX_REWARD_BYTES:
            out.error = f"{path} is {stat.size} bytes; a reward is a number"
            return
        text = (await sandbox.read_file(path, MAX_REWARD_BYTES)).decode("utf-8", "replace")
        try:
            out.rewards = parse_json(text) if path == REWARD_JSON else parse_text(text)
        except ValueError as e:
            out.error = f"{path}: {e}"
            return
        out.reward = primary(out.rewards)
        return
    out.error = f"tests/test.sh wrote no reward ({REWARD_TXT} or {REWARD_JSON}); it exited {out.exit_code}"


def parse_text(text: str) -> dict:
    if not text.strip():
        raise ValueError("empty")
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"not a number: {text.strip()[:60]!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {value!r}")
    return {"reward": value}


def parse_json(text: str) -> dict:
    if not text.strip():
        raise ValueError("empty")
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not JSON: {e}") from None
    values = data if isinstance(data, dict) else {"reward": data}
    if not values:
        raise ValueError("an empty object")
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{key!r} is not a finite number: {value!r}")
    return {str(k): float(v) for k, v in values.items()}


def primary(rewards: dict) -> float:
    """The score of a reward.json: its "reward" key, else its one value, else the mean of its values."""
    if "reward" in rewards:
        return rewards["reward"]
    values = list(rewards.values())
    return values[0] if len(values) == 1 else sum(values) / len(values)
