"""JSON someone else wrote (a run folder handed over): parsed with no recursion in Python, to a bounded
depth, every failure a ValueError of one line.

pydantic-core's parser (jiter) reads the bytes as they are: no decoded copy of the whole text (a str of
up to four times the file, when one character of it needs four bytes), invalid UTF-8 refused, nesting
deeper than MAX_DEPTH refused. It refuses a lone surrogate escape (`"\\ud800"`), which
Trajectory.to_json writes for text that is not valid Unicode: such a file is read by the standard
library instead, and its depth checked afterwards.
"""
from __future__ import annotations

import json
from typing import Any, Union

import pydantic_core

from .errors import DataError

MAX_DEPTH = 200  # about jiter's own limit (201 lists, 200 objects); deepcopy and pydantic manage this deep


class BadJSON(DataError):
    """Not JSON this reader takes; the message is one line."""


def parse_json(data: Union[bytes, str]) -> Any:
    """The value `data` holds: dicts, lists, str, int, float (NaN and infinities as Python writes them),
    bool, None. BadJSON for anything else: not UTF-8, cut short, trailing text, nested too deep."""
    try:
        return pydantic_core.from_json(data)
    except ValueError as e:
        message = str(e)
        if "recursion limit" in message:
            raise BadJSON(f"nested more than {MAX_DEPTH} levels deep ({_where(message)})") from None
        if "surrogate" not in message and "hex escape" not in message:
            raise BadJSON(message.splitlines()[0] if message else "not JSON") from None
    try:  # a lone surrogate: the standard library keeps it, as json.dumps wrote it
        value = json.loads(data)
    except RecursionError:
        raise BadJSON(f"nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as e:  # UnicodeDecodeError included
        raise BadJSON(str(e).splitlines()[0] if str(e) else "not JSON") from None
    _check_depth(value)
    return value


def _where(message: str) -> str:
    at = message.rfind(" at line ")
    return message[at + 4:] if at >= 0 else "somewhere"


def _check_depth(value: Any) -> None:
    """BadJSON when `value` nests lists and dicts more than MAX_DEPTH deep (walked without recursion)."""
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        v, depth = stack.pop()
        children = v.values() if isinstance(v, dict) else v
        if depth > MAX_DEPTH:
            raise BadJSON(f"nested more than {MAX_DEPTH} levels deep")
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
