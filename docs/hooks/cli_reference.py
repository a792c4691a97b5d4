"""MkDocs hook: the command-line reference, rendered at build time from the Typer app itself.

A page holding the line `<!-- cli-reference -->` gets, in its place, one section per command (groups
and their subcommands, depth first): the command's help text, its usage line and a table of its
parameters, each as `--help` prints it (names, metavar, help, default), grouped under the panels the
commands declare. Hidden commands and options (old names kept as aliases) are left out.

Our own hook rather than mkdocs-click: Typer (0.29) carries its own copy of click, so its commands
and options are not instances of the `click` package's classes, and mkdocs-click's `isinstance`
checks skip every option in its table style without a word. Here the objects are only asked what
`--help` asks them, so whatever click Typer carries, the page says what the terminal says.
"""
from __future__ import annotations

import html
import os
import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- cli-reference -->"
WIDTH = 100  # the width --help is formatted at for the usage lines


def on_config(config: Any) -> Any:
    src = str(Path(config["config_file_path"]).parent / "src")
    if src not in sys.path:  # the checkout's own package, as the API reference reads it
        sys.path.insert(0, src)
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())


def render() -> str:
    import typer.main

    from insandbox.cli.app import app

    os.environ.setdefault("COLUMNS", str(WIDTH))
    root = typer.main.get_command(app)
    ctx = root.make_context("insandbox", [], resilient_parsing=True)
    return "\n".join(_command(root, ctx, level=2))


def _command(command: Any, ctx: Any, level: int) -> list[str]:
    out = [f"{'#' * level} {ctx.command_path}", ""]
    help_text = (command.help or "").strip()
    if not help_text:
        raise ValueError(f"{ctx.command_path} has no help text to document")
    for paragraph in help_text.split("\n\n"):
        out += [f"<p>{_text(' '.join(paragraph.split()))}</p>", ""]
    pieces = " ".join(command.collect_usage_pieces(ctx))
    out += ["```text", f"{ctx.command_path} {pieces}".rstrip(), "```", ""]
    out += _parameters(command, ctx)
    subcommands = getattr(command, "commands", None)
    if subcommands:
        rows = []
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                rows.append((f"{ctx.command_path} {name}", sub.get_short_help_str(limit=200)))
        out += _table(("command", "what it does"), rows)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            sub_ctx = sub.make_context(name, [], parent=ctx, resilient_parsing=True)
            out += _command(sub, sub_ctx, level + 1)
    return out


def _parameters(command: Any, ctx: Any) -> list[str]:
    panels: dict[str, list[tuple[str, str]]] = {}
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False) or param.name == "help":
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, text = record
        panel = getattr(param, "rich_help_panel", None) or ("Arguments" if param.param_type_name == "argument"
                                                             else "Options")
        panels.setdefault(panel, []).append((names, text))
    out: list[str] = []
    for panel, rows in panels.items():
        out += [f"<p><strong>{_text(panel)}</strong></p>", ""]
        out += _table(("parameter", "meaning"), rows)
    return out


def _table(head: tuple[str, str], rows: list[tuple[str, str]]) -> list[str]:
    """An HTML table, every cell escaped: help texts hold `<`, `|`, `*` and backticks that Markdown
    would otherwise read as markup."""
    if not rows:
        return []
    lines = ["<table>", f"<thead><tr><th>{head[0]}</th><th>{head[1]}</th></tr></thead>", "<tbody>"]
    for first, second in rows:
        lines.append(f"<tr><td><code>{_text(first)}</code></td><td>{_text(' '.join(second.split()))}</td></tr>")
    lines += ["</tbody>", "</table>", ""]
    return lines


def _text(value: str) -> str:
    return html.escape(value, quote=False)
