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


_parsed: dict[tuple, Any] = {}  # (path, mtime, size) -> value: a run reads the same packaged files again


def load_cached(path: Path) -> Any:
    """The value of a YAML file, parsed once per content (libyaml's parser where PyYAML has it: the
    packaged price table takes 50 ms to parse in pure Python, a run's start would pay it each time).
    Raises what reading and parsing raise (OSError, UnicodeDecodeError, yaml.YAMLError); a deep copy."""
    import copy

    import yaml

    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _parsed:
        text = path.read_text(encoding="utf-8")
        if len(_parsed) > 64:
            _parsed.clear()
        _parsed[key] = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return copy.deepcopy(_parsed[key])


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
