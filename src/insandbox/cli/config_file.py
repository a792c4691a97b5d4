"""`-c FILE.yaml` (`--config`) for run, bench and rl rollout: option values in a file, in the sections of
RunConfig, the command line overriding it.

    model:      {base_url: http://localhost:8000/v1, model: Qwen/Qwen3-8B, temperature: 0.7}
    limits:     {max_steps: 50, time_limit: 600}
    sandbox:    {memory: 8g, network: registries}
    copy_back:  {max_output_size: 2g}
    run:        {mode: sandbox}             # run's own options
    bench:      {concurrency: 16}           # bench's own
    rollout:    {repeats: 4, max_tokens: 1024}   # rl rollout's own

A key is an option's name as the command line spells it, with _ for - (`--max-output-size` is
`max_output_size`); a value is what the option takes (a size as 8g, a list as a YAML list, `env` also
as a mapping, a JSON option such as `extra_body` also as YAML). Paths are relative to the file's folder.
A command reads the sections it has options in and passes over the others, so one file serves run, bench
and rl rollout; a section or key no command knows is refused in one line that names it and its line, as is
a file that is not YAML.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from typer.core import TyperOption

from ..core.errors import ConfigError
from .common import click_exceptions, fail
from .options import section_of

# the section of a command's own options (those not in the shared table)
OWN_SECTION = {"run": "run", "bench": "bench", "rl rollout": "rollout"}
NOT_IN_FILES = {"config", "help"}


def sections_of(command: Any, name: str) -> dict[str, dict[str, Any]]:
    """{section: {key: option}} of a command that takes --config."""
    found: dict[str, dict[str, Any]] = {}
    shared = getattr(command.callback, "shared_options", ())  # the table's options (typer's wrapper copies it)
    for param in command.params:
        if isinstance(param, TyperOption) and param.name not in NOT_IN_FILES:
            section = section_of(param.name) if param.name in shared else None
            found.setdefault(section or OWN_SECTION[name], {})[param.name] = param
    return found


_app: Any = None  # the command line's Typer app, given by app.py (this module is imported by it)


def use_app(app: Any) -> None:
    global _app
    _app = app
    known_keys.cache_clear()


@functools.lru_cache(maxsize=1)
def known_keys() -> dict[str, set[str]]:
    """Every section's keys over all the commands that take --config (a file serves them all)."""
    import typer.main

    root = typer.main.get_command(_app)
    known: dict[str, set[str]] = {}

    def walk(command: Any, path: list[str]) -> None:
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, path + [name])
        if any(p.name == "config" for p in getattr(command, "params", ())) and " ".join(path) in OWN_SECTION:
            for section, keys in sections_of(command, " ".join(path)).items():
                known.setdefault(section, set()).update(keys)
    walk(root, [])
    order = ["model", "limits", "sandbox", "copy_back", *OWN_SECTION.values()]
    return {section: known[section] for section in sorted(known, key=order.index)}


def read(path: Path) -> tuple[dict, dict[tuple, int]]:
    """The file's mapping and the line of each section and key; ConfigError of one line when it is not
    a mapping of sections."""
    import yaml

    from ..core.yaml_file import yaml_error_line

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--config {path}: {getattr(e, 'strerror', None) or e}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"--config {yaml_error_line(path, e)}") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: a mapping of sections (model:, limits:, sandbox:, ...), not a "
                          f"{type(data).__name__}")
    lines: dict[tuple, int] = {}
    for key, value in node.value:
        lines[(key.value,)] = key.start_mark.line + 1
        if isinstance(value, yaml.MappingNode):
            for sub, _ in value.value:
                lines[(key.value, sub.value)] = sub.start_mark.line + 1
    return data, lines


def apply(ctx: Any, command: Any, name: str, path: Path) -> None:
    """Set the options not given on the command line `name` from the file's values (checked as the command
    line's are); exit 2 with one line for a file that cannot be read, an unknown section or key, a bad value."""
    try:
        data, lines = read(path)
        mine = sections_of(command, name)
        known = known_keys()
        for section, values in data.items():
            at = f"{path} line {lines.get((section,), '?')}"
            if section not in known:
                raise ConfigError(f"--config {at}: unknown section {section!r} (the sections: "
                                  f"{', '.join(known)})")
            if not isinstance(values, dict):
                raise ConfigError(f"--config {at}: {section} holds settings (key: value), not a "
                                  f"{type(values).__name__}")
            for key, value in values.items():
                at = f"{path} line {lines.get((section, key), '?')}"
                if key not in known[section]:
                    raise ConfigError(f"--config {at}: unknown key {section}.{key} ({section} takes: "
                                      f"{', '.join(sorted(known[section]))})")
                param = mine.get(section, {}).get(key)
                if param is not None and ctx.get_parameter_source(param.name).name != "COMMANDLINE":
                    ctx.params[param.name] = _value(ctx, param, value, path.parent, f"{at}: {section}.{key}")
    except ConfigError as e:
        fail(str(e))


def _value(ctx: Any, param: Any, value: Any, folder: Path, where: str) -> Any:
    """The file's value as the option would have it from the command line."""
    if not param.multiple and isinstance(value, (dict, list)) and param.type_descriptor.annotation is str:
        value = json.dumps(value)  # a JSON option (extra_body) written as YAML
    if param.multiple:
        if isinstance(value, dict):  # env: {KEY: value}
            value = [f"{k}={'' if v is None else v}" for k, v in value.items()]
        elif not isinstance(value, list):
            value = [value]
    try:
        value = param.process_value(ctx, value)
    except click_exceptions().BadParameter as e:
        raise ConfigError(f"--config {where}: {e.format_message()}") from None
    if param.type_descriptor.is_path and value is not None:  # relative to the file, not to where it is run
        value = [folder / v for v in value] if param.multiple else folder / value
    return value
