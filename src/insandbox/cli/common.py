"""What every command shares: one-line failures with their exit status, and running a command's
coroutine so that Ctrl-C and SIGTERM stop it cleanly."""
from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from typing import Any, Optional

import typer

from ..core.errors import ConfigError, InsandboxError


class BadArgument(ConfigError):
    """An argument typer cannot check: exit 2 with this one line."""


def fail(message: str, code: int = 2) -> None:
    from .console import escape_controls

    typer.echo(f"insandbox: {escape_controls(message)}", err=True)
    raise typer.Exit(code)


def run_until_done(make: Callable[[], Any]) -> tuple[Any, Optional[int]]:
    """Run a coroutine; the first Ctrl-C/SIGTERM cancels it (the run cleans up and saves),
    a second one removes this process's sandboxes at once and exits."""
    from ..sandbox import kill_all_now

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    main = loop.create_task(make())
    got: dict[str, int] = {}

    def on_signal(sig: int) -> None:
        if "sig" not in got:
            got["sig"] = sig
            typer.echo(f"\ninsandbox: {signal.Signals(sig).name}: stopping, saving the run and removing the "
                       "sandbox (again to force)", err=True)
            main.cancel()
        else:
            kill_all_now()
            os._exit(128 + sig)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        return loop.run_until_complete(main), None
    except asyncio.CancelledError:
        return None, got.get("sig", signal.SIGINT)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def finish(make: Callable[[], Any], bad: tuple[type[BaseException], ...] = (),
           failed: tuple[type[BaseException], ...] = ()) -> Any:
    """Run a command's coroutine to its end (`run_until_done`): an error of insandbox's exits with its
    branch's status (ConfigError, DataError 2; SandboxError, ModelError... 1), `bad` exceptions 2 and
    `failed` ones 1, a host file that cannot be written 1, a signal 128+N; else its result."""
    try:
        result, sig = run_until_done(make)
    except Exception as e:
        code = exit_code_of(e, bad, failed)
        if code is not None:
            fail(str(e), code)
        if isinstance(e, OSError) and e.filename is not None:
            fail(f"{e.filename}: {e.strerror or e}", 1)
        raise  # a bug (or an OSError not about a file of this machine): its traceback is what a report needs
    if sig is not None:
        raise typer.Exit(128 + sig)
    return result


def exit_code_of(e: BaseException, bad: tuple[type[BaseException], ...] = (),
                 failed: tuple[type[BaseException], ...] = ()) -> Optional[int]:
    """The exit status of a command that ended on `e`: 2 for `bad` exceptions, 1 for `failed` ones, the
    branch's own for an error of insandbox's (core/errors.py); None for anything else (a bug)."""
    if isinstance(e, bad):
        return 2
    if isinstance(e, failed):
        return 1
    return e.exit_code if isinstance(e, InsandboxError) else None


def click_exceptions():
    """Click's exception classes: typer vendors its own click from 0.2x on, older ones use click."""
    try:
        from typer._click import exceptions
    except ImportError:  # pragma: no cover - older typer
        from click import exceptions
    return exceptions


GROUPS = ("rl", "image", "export", "import", "pool")  # commands whose name is two words


def command_of(argv: list[str]) -> str:
    """The command as typed, for messages: 'report', 'rl export', 'image status'."""
    words = []
    for arg in argv:
        if arg.startswith("-") or len(words) == (2 if words and words[0] in GROUPS else 1):
            break
        words.append(arg)
    return " ".join(words)


def missing_need(e: BaseException, command: str) -> Optional[str]:
    """The one line for a failure that is no bug but something this machine lacks: the sandbox engine
    (a SandboxError, also as the cause of another error) or an optional extra; None for anything else."""
    from ..core.extras import MissingExtra, install_hint
    from ..sandbox import SandboxError

    seen = e
    while seen is not None:
        if isinstance(seen, SandboxError):
            return str(seen)
        seen = seen.__cause__
    if isinstance(e, MissingExtra):
        return str(e)
    if isinstance(e, ModuleNotFoundError) and e.name:
        return install_hint(e.name, command)
    return None
