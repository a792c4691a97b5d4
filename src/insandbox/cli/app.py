"""The `insandbox` command: the Typer app, its commands (one module each in this folder) and main().

Exit status: 0 the command did its work (a run that ended normally, whatever its exit
reason); 1 the model server, the sandbox or insandbox failed, or what it needs is missing (no
Docker engine, an optional extra not installed: one line on stderr that says so); 2 bad
arguments, settings or input data (one line on stderr, nothing created); 128+N after signal N. An
error of insandbox's exits with its branch's status (core/errors.py, docs/reference/errors.md).
"""
from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from . import atif, bench, clean, config_file, gateway, image, pool, replay, rl, run, serve, view
from .command import Command
from .common import click_exceptions, command_of, exit_code_of, missing_need

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Give a language model a computer: run it in a Docker sandbox with bash, an editor and submit.")
config_file.use_app(app)  # a config file's sections are those of every command of this app
image_app = typer.Typer(no_args_is_help=True, help="Build and inspect the sandbox image.")
app.add_typer(image_app, name="image")
app.add_typer(rl.app, name="rl")
export_app = typer.Typer(no_args_is_help=True, help="Write runs in another format.")
import_app = typer.Typer(no_args_is_help=True, help="Make run folders from another format.")
app.add_typer(export_app, name="export")
app.add_typer(import_app, name="import")
pool_app = typer.Typer(no_args_is_help=True, help="A sandbox service that outlives a run.")
app.add_typer(pool_app, name="pool")
app.add_typer(gateway.app, name="gateway")
pool_app.command("serve", cls=Command)(pool.pool_serve)
pool_app.command("status", cls=Command)(pool.pool_status)
export_app.command("atif", cls=Command)(atif.export_atif)
import_app.command("atif", cls=Command)(atif.import_atif)
app.command("run", cls=Command)(run.run)
app.command("bench", cls=Command)(bench.bench)
app.command("report", cls=Command)(bench.report)
app.command("replay", cls=Command)(replay.replay)
app.command("fork", cls=Command)(replay.fork)
app.command("clean", cls=Command)(clean.clean)
app.command("view", cls=Command)(view.view)
app.command("serve-model", cls=Command)(serve.serve_model)
app.command("scripted-server", cls=Command)(serve.scripted_server)
image_app.command("build", cls=Command)(image.image_build)
image_app.command("build-proxy", cls=Command)(image.image_build_proxy)
image_app.command("status", cls=Command)(image.image_status)
image_app.command("export", cls=Command)(image.image_export)


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"insandbox {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                   help="Print the version and exit.")] = False) -> None:
    """Give a language model a computer: run it in a Docker sandbox with bash, an editor and submit."""


def main() -> None:
    """Console entry point. Usage errors are one line and exit 2; a missing engine or extra is one
    line and exit 1. Once the command is done (everything saved, the sandbox gone) the process
    leaves with os._exit: the interpreter's own shutdown, tearing down openai, pydantic and the
    Docker SDK, would add ~0.3 s to every run for nothing."""
    for stream in (sys.stdout, sys.stderr):  # text no encoding can write (a lone surrogate) is written out
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError):
            pass
    exc = click_exceptions()
    try:
        code = app(standalone_mode=False)
        code = code if isinstance(code, int) else 0
    except exc.NoArgsIsHelpError as e:  # `insandbox` alone: the help, as asked
        typer.echo(e.ctx.get_help() if e.ctx else e.format_message())
        code = 0
    except exc.UsageError as e:
        path = e.ctx.command_path if e.ctx else "insandbox"
        typer.echo(f"insandbox: {e.format_message()} (see {path} --help)", err=True)
        code = 2
    except typer.Abort:
        code = 130
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception as e:
        line, code = missing_need(e, command_of(sys.argv[1:])), 1
        if line is None and exit_code_of(e) is not None:  # an error of insandbox's, said for a person
            line, code = str(e), exit_code_of(e)
        if line is None:
            raise  # a bug: its traceback is what a report needs
        from .console import escape_controls

        typer.echo(f"insandbox: {escape_controls(line)}", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
