"""The click command class of every insandbox command (app.py registers each with it):

- its options shown one way in --help: a metavar is a word in capitals (PATH, N, SIZE, URL), never a
  Python type; a default is `[default: X]`, a number as written (120, not 120.0), an on/off flag's as
  on or off, a default that depends on something else in words (`[default: the server's]`);
- old option names (renamed.py) accepted for one release, with a one-line note;
- `-c/--config FILE` (a command that declares `config`): the file's values (config_file.py) for the
  options not given on the command line.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

from typer.core import TyperArgument, TyperCommand, TyperOption

from . import config_file, renamed

# metavars by the value's type, where an option names none of its own
METAVARS = {int: "N", float: "NUMBER", str: "TEXT", Path: "PATH"}


def metavar_of(param: Any) -> str:
    annotation = param.type_descriptor.annotation
    if param.type_descriptor.is_list:
        annotation = (get_args(annotation) or (str,))[0]
    return METAVARS.get(annotation, "VALUE")


class Option(TyperOption):
    """A TyperOption whose default reads as said above."""

    def _get_default_string(self, *, ctx: Any, show_default_is_str: bool, default_value: Any) -> str:
        if show_default_is_str:
            return str(self.show_default)  # typer would put it in parentheses
        if self.is_bool_flag and self.secondary_opts:
            return "on" if default_value else "off"
        if isinstance(default_value, float):
            return f"{default_value:g}"
        return super()._get_default_string(ctx=ctx, show_default_is_str=False, default_value=default_value)


class Argument(TyperArgument):
    """A TyperArgument shown by its name alone (QUERY, RUN_DIR), without a Python type after it."""

    def get_help_record(self, ctx: Any) -> Any:
        record = super().get_help_record(ctx)
        return None if record is None else (self._rich_display_name(), record[1])

    def _usage_display_name(self) -> str:
        name = self.display_name_raw + ("..." if self.nargs != 1 else "")
        return name if self.required else f"[{name}]"


class Command(TyperCommand):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, TyperOption):
                param.__class__ = Option
                if param.metavar is None and not param.is_flag:
                    param.metavar = metavar_of(param)
            elif isinstance(param, TyperArgument):
                param.__class__ = Argument
                if param.metavar is None:
                    param.metavar = param.name.upper()

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        takes_value = [opt for p in self.params if isinstance(p, TyperOption) and not p.is_flag for opt in p.opts]
        args = renamed.rewrite(command_name(ctx), args, takes_value)
        rest = super().parse_args(ctx, args)
        if ctx.params.get("config") is not None and any(isinstance(p, TyperOption) and p.name == "config"
                                                         for p in self.params):  # rl train's is its argument
            config_file.apply(ctx, self, command_name(ctx), Path(ctx.params["config"]))
        return rest


def command_name(ctx: Any) -> str:
    """The command as typed without the program's name: 'run', 'rl rollout' (the contexts' names up from it,
    the program's group left out)."""
    names = []
    while ctx is not None:
        if ctx.parent is not None or not getattr(ctx.command, "commands", None):
            names.insert(0, ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(names)
