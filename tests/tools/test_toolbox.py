"""Pure functions: schemas, argument parsing, text tool calls, output clipping, prompts, archives."""
from __future__ import annotations

import json

import pytest

from insandbox.tools import ToolArgumentError, default_tools, parse_arguments


def test_tool_schemas_are_exact():
    schemas = {s["function"]["name"]: s for s in (t.schema() for t in default_tools())}
    assert list(schemas) == ["execute_bash", "str_replace_editor", "submit"]
    for s in schemas.values():
        assert s["type"] == "function" and s["function"]["parameters"]["type"] == "object"
        assert s["function"]["description"]
    bash = schemas["execute_bash"]["function"]["parameters"]
    assert list(bash["properties"]) == ["command"] and bash["required"] == ["command"]
    ed = schemas["str_replace_editor"]["function"]["parameters"]
    assert list(ed["properties"]) == ["command", "path", "file_text", "old_str", "new_str", "insert_line",
                                      "view_range"]
    assert ed["required"] == ["command", "path"]
    assert ed["properties"]["command"]["enum"] == ["view", "create", "str_replace", "insert", "undo_edit"]
    assert ed["properties"]["view_range"] == {"type": "array", "items": {"type": "integer"},
                                              "description": ed["properties"]["view_range"]["description"]}
    sub = schemas["submit"]["function"]["parameters"]
    assert sub["properties"] == {} and sub["required"] == []
    json.dumps(list(schemas.values()))  # serialisable as sent


def test_parse_arguments():
    assert parse_arguments('{"command": "ls"}') == {"command": "ls"}
    assert parse_arguments("") == {} and parse_arguments(None) == {}
    assert parse_arguments('"{\\"command\\": \\"ls\\"}"') == {"command": "ls"}  # double-encoded
    with pytest.raises(ToolArgumentError, match="not valid JSON"):
        parse_arguments('{"command": "ls"')
    with pytest.raises(ToolArgumentError, match="JSON object"):
        parse_arguments("[1, 2]")

