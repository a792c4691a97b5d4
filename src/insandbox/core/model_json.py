"""JSON that a model wrote (tool-call arguments, calls written as text), read without trusting it.

A policy's reply can be anything: 100,000 nested brackets, NaN, a key given twice, a number
with a million digits. `json.loads` would raise RecursionError for the first (not a ValueError,
so it escaped every caller's `except ValueError` and ended the episode as insandbox's own bug),
let NaN and Infinity through as numbers no tool can use, and keep the last of two keys without
a word. `loads` turns each of these into a ValueError saying what is wrong, which callers hand
to the model as the reason its call could not be read. `dumps` writes a value back to JSON
text with the same limit on depth, so no value read from a reply can make a later step recurse.
"""
from __future__ import annotations

import json
import math
from typing import Any

from .errors import ToolError

MAX_DEPTH = 64  # arrays and objects inside one another; a real tool call needs 2 or 3
MAX_DIGITS = 1000  # of an integer (Python refuses to convert more than 4,300, with advice meant for programmers)


class ModelJSONError(ToolError, ValueError):
    """The text is not JSON insandbox can use; the message says why, for the model to read."""


def _no_constant(name: str) -> Any:
    raise ModelJSONError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ModelJSONError(f"{text[:40]} is too large for a number")
    return value


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise ModelJSONError(f"a number of {len(text.lstrip('-')):,} digits is too long")
    return int(text)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ModelJSONError(f"the key {key[:80]!r} appears twice in one object")
        out[key] = value
    return out


def depth(value: Any) -> int:
    """How deeply arrays and objects nest in `value` (a scalar: 0), walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if level > MAX_DEPTH:  # deep enough to refuse: no need to walk the rest
            return level
        stack.extend((child, level + 1) for child in children)
    return deepest


def loads(text: str) -> Any:
    """The value of JSON `text`; ModelJSONError (a ValueError) when it is not JSON, nests deeper than
    MAX_DEPTH, holds NaN, Infinity, a number too large for a float or an integer of more than MAX_DIGITS
    digits, or gives a key twice."""
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite, parse_int=_integer,
                           object_pairs_hook=_unique_keys)
    except RecursionError:
        raise ModelJSONError(f"it nests arrays or objects more than {MAX_DEPTH} deep") from None
    except ModelJSONError:
        raise
    except ValueError as e:  # JSONDecodeError
        raise ModelJSONError(str(e)) from None
    if depth(value) > MAX_DEPTH:
        raise ModelJSONError(f"it nests arrays or objects more than {MAX_DEPTH} deep")
    return value


def dumps(value: Any) -> str:
    """`value` as JSON text (non-ASCII kept); ModelJSONError when it nests deeper than MAX_DEPTH or holds
    something JSON cannot write (NaN included)."""
    if depth(value) > MAX_DEPTH:
        raise ModelJSONError(f"it nests arrays or objects more than {MAX_DEPTH} deep")
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise ModelJSONError(f"it cannot be written as JSON ({e})") from None
