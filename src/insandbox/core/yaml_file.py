"""A YAML file a user wrote (a task, a config file), read with its mistakes said in one line: the file, the
line and column, and what the parser found there."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import ConfigError


def yaml_error_line(path: Path, error: Exception) -> str:
    """PyYAML's error (several lines, with a caret under the spot) as one line."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    context = getattr(error, "context", None)
    return f"{path}{where}: not valid YAML: {problem}" + (f" ({context})" if context else "")


def read_yaml(path: Path, what: str = "") -> Any:
    """The value a YAML file holds; a ConfigError of one line when it cannot be read or parsed."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{what + ' ' if what else ''}{path}: {getattr(e, 'strerror', None) or e}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError((what + " " if what else "") + yaml_error_line(path, e)) from None
