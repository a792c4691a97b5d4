"""An error of insandbox's that ends a command is one line on stderr and its branch's exit status;
anything else (a bug) keeps its traceback. The command raising it is added to the real app."""
from __future__ import annotations

import subprocess
import sys

import pytest

RAISE = """
import sys
from insandbox.cli import app, main
from {module} import {name}

@app.command("raise-it")
def raise_it() -> None:
    {raising}

sys.argv = ["insandbox", "raise-it"]
main()
"""


def run_raising(module: str, name: str, raising: str) -> subprocess.CompletedProcess:
    code = RAISE.format(module=module, name=name, raising=raising)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("module,name,status", [
    ("insandbox.core.errors", "ConfigError", 2),
    ("insandbox.core.data_source", "DataError", 2),
    ("insandbox.replay.replayer", "ReplayError", 2),
    ("insandbox.rl.rollout.chat", "ChatTemplateError", 2),
    ("insandbox.core.errors", "ModelError", 1),
    ("insandbox.core.errors", "SandboxError", 1),
    ("insandbox.bench.sample", "EngineOutage", 1),
])
def test_an_error_of_insandbox_is_one_line_and_its_branch_status(module, name, status):
    r = run_raising(module, name, f'raise {name}("what went wrong\\x1b[31m, said once")')
    assert r.returncode == status, r.stderr
    assert r.stderr == "insandbox: what went wrong\\x1b[31m, said once\n"  # control characters shown, not sent


def test_the_cause_of_an_error_does_not_change_its_status():
    r = run_raising("insandbox.core.errors", "DataError",
                    'raise DataError("rows.jsonl: not JSONL") from KeyError("x")')
    assert r.returncode == 2 and r.stderr == "insandbox: rows.jsonl: not JSONL\n"


@pytest.mark.parametrize("module,name", [("insandbox.sandbox.base", "SandboxFileError"),
                                         ("insandbox.models.retrying", "StreamStalled"),
                                         ("builtins", "KeyError")])
def test_an_error_never_meant_for_the_command_line_keeps_its_traceback(module, name):
    r = run_raising(module, name, f'raise {name}("x")')
    assert r.returncode == 1 and "Traceback (most recent call last)" in r.stderr and f"{name}: " in r.stderr
