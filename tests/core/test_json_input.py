"""JSON from someone else: no recursion in Python, a bounded depth, one-line errors (pure)."""
from __future__ import annotations

import json
import math

import pytest

from insandbox.core.json_input import MAX_DEPTH, BadJSON, parse_json


def nested(depth: int, inner: str = "") -> bytes:
    return ("[" * depth + inner + "]" * depth).encode()


@pytest.mark.parametrize("data", [
    nested(100_000), b'{"a": ' * 50_000, nested(MAX_DEPTH + 2),
    # the standard library's path (a lone surrogate in it): too deep for its recursion, or only for ours
    nested(100_000, '"\\ud800"'), nested(MAX_DEPTH + 1, '"\\ud800"'), nested(900, '"\\udc00"'),
])
def test_nesting_beyond_the_limit_is_one_line_never_a_recursion_error(data):
    with pytest.raises(BadJSON, match=f"nested more than {MAX_DEPTH} levels deep") as e:
        parse_json(data)
    assert len(str(e.value).splitlines()) == 1


def test_nesting_up_to_the_limit_is_read_by_either_parser():
    assert parse_json(nested(MAX_DEPTH)) == nested_list(MAX_DEPTH)
    assert parse_json(nested(MAX_DEPTH - 1, '"\\ud800"')) == nested_list(MAX_DEPTH - 1, "\ud800")


def nested_list(depth: int, inner=None) -> list:
    out: list = [] if inner is None else [inner]
    for _ in range(depth - 1):
        out = [out]
    return out


@pytest.mark.parametrize("data, says", [
    (b'{"a": "\xff"}', "invalid unicode"), (b'{"a": "\xed\xa0\x80"}', "invalid unicode"),
    (b'{"a": [1, 2', "EOF"), (b"", "EOF"), (b'{"a": 1} {"b": 2}', "trailing"),
    (b"[" + b"9" * 5000 + b"]", "out of range"), (b"{'a': 1}", "key must be a string"),
    (b'["\\ud800", "\xff"]', "codec can't decode"), (b'["\\ud800", ', "Expecting value"),
])
def test_what_is_not_json_is_one_line(data, says):
    with pytest.raises(BadJSON, match=says) as e:
        parse_json(data)
    assert len(str(e.value).splitlines()) == 1


def test_what_insandbox_writes_reads_back_as_it_was():
    value = {"s": "café 中文 🙂 {\"x\": [1]}", "lone": "\ud800 and \udfff", "n": [0, -1, 2 ** 70, 1.5, None, True],
             "inf": [math.inf, -math.inf]}
    # as Trajectory.to_json writes: UTF-8 as it is, or \u escapes when the text holds lone surrogates
    honest = {k: v for k, v in value.items() if k != "lone"}
    assert parse_json(json.dumps(honest, ensure_ascii=False, indent=1).encode()) == honest
    assert parse_json(json.dumps(value).encode()) == value == parse_json(json.dumps(value))
    assert math.isnan(parse_json(b"[NaN]")[0])
