"""The toolbox without a sandbox: schemas, argument parsing, and the one place where the model's
mistakes become tool errors while a broken sandbox ends the episode."""
from __future__ import annotations

import json

import pytest

from insandbox.sandbox import OperationError, SandboxError, SandboxFileError, ServerError
from insandbox.tools import ToolArgumentError, ToolBox, ToolCall, default_tools, parse_arguments


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



def test_lone_surrogates_are_refused_where_they_sit():
    """Regression: "\\ud800" is valid JSON but no character; it ended the run as sandbox_error with 0 steps."""
    with pytest.raises(ToolArgumentError, match=r"`command` holds U\+D800 at character 5"):
        parse_arguments('{"command": "echo \\ud800"}')
    with pytest.raises(ToolArgumentError, match=r"`path` holds U\+DCFF at character 2"):
        parse_arguments('{"command": "view", "path": "/x\\udcff"}')
    assert parse_arguments('{"command": "echo \\ud83d\\ude00"}') == {"command": "echo 😀"}  # a valid pair


class _Failing:
    """A user-defined tool (the ToolBox takes any), failing the way it is told to."""

    name = "fail"

    def schema(self) -> dict:
        return {"type": "function", "function": {"name": "fail", "parameters": {"type": "object"}}}

    async def run(self, sandbox, args):
        raise {"operation": OperationError("/testbed/pipe is a FIFO, not a regular file"),
               "server": ServerError("sb", "OSError: [Errno 5] Input/output error"),
               "sandbox": SandboxError("the container stopped")}[args["how"]]


def test_the_toolbox_is_the_one_place_model_errors_become_tool_errors(run_async):
    box = ToolBox([_Failing()])

    async def call(how):
        return (await box.call(None, ToolCall("c1", "fail", json.dumps({"how": how}))))[0]

    out = run_async(call("operation"))
    assert out.error and out.text == "Error: /testbed/pipe is a FIFO, not a regular file"
    out = run_async(call("server"))  # the in-container server refused: the sandbox is fine, the episode goes on
    assert out.error and "Input/output error" in out.text
    assert not isinstance(ServerError("s", "m"), SandboxError) and not isinstance(SandboxFileError("m"), SandboxError)
    with pytest.raises(SandboxError):  # a broken sandbox is not the model's doing: it ends the episode
        run_async(call("sandbox"))
    out = run_async(box.call(None, ToolCall("c2", "nope", "{}")))[0]
    assert out.error and "no tool named 'nope'" in out.text


class _Noisy:
    name = "noisy"

    def schema(self) -> dict:
        return {"type": "function", "function": {"name": self.name, "description": "d", "parameters": {}}}

    async def run(self, sandbox, args):
        from insandbox.tools.base import ToolOutput

        return ToolOutput(args["text"], exit_code=0)


def test_observations_carry_no_control_bytes_and_say_what_was_replaced(run_async):
    box = ToolBox([_Noisy()])

    def call(text: str):
        return run_async(box.call(None, ToolCall("c", "noisy", json.dumps({"text": text}))))[0]

    out = call("ok\tcol\r\nline\n")  # tab, newline and carriage return are text
    assert out.text == "ok\tcol\r\nline\n" and "cleaned" not in out.meta
    out = call("a\x00b\x07c\x7fd\x9b \x1b[31mred\x1b[0m \x1b]0;title\x07end")
    body, note = out.text.rsplit("\n", 1)
    assert body == "a\ufffdb\ufffdc\ufffdd\ufffd red end"
    assert note == ("[insandbox: 4 control characters (NUL and the like) replaced with \ufffd; "
                    "3 terminal escape sequences removed: the output held bytes that are not text]")
    assert out.meta["cleaned"] == {"escape_sequences": 3, "replaced_characters": 4}
    # a lone surrogate from a tool (text decoded with surrogateescape) cannot be sent as UTF-8
    out = run_async(box.call(None, ToolCall("c", "noisy", {"text": "x\ud800y"})))[0]
    json.dumps(out.text, ensure_ascii=False).encode("utf-8")
    assert out.text.startswith("x\ufffdy\n[insandbox: 1 control character")
    out = call("\x00" * 5000)
    assert "5,000 control characters" in out.text and "\x00" not in out.text
