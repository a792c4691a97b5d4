"""Pure functions: schemas, argument parsing, text tool calls, output clipping, prompts, archives."""
from __future__ import annotations

import io
import json
import os
import socket
import tarfile

import pytest

from insandbox.models.openai_compat import shrink_max_tokens
from insandbox.models.tool_text import parse_text_tool_calls
from insandbox.prompts import load_prompt_config
from insandbox.sandbox.archive import extract_safely
from insandbox.sandbox.cleanup import leftover_reason
from insandbox.sandbox.docker import LABEL_OWNER
from insandbox.sandbox.server import Collector
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


def test_text_tool_calls_hermes_style():
    content = ('I will list files.\n<tool_call>\n{"name": "execute_bash", "arguments": {"command": "ls"}}\n'
               '</tool_call>\n<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
    calls, rest, errors = parse_text_tool_calls(content)
    assert [c.name for c in calls] == ["execute_bash", "submit"]
    assert json.loads(calls[0].arguments) == {"command": "ls"} and rest == "I will list files." and not errors
    assert len({c.id for c in calls}) == 2
    calls, _, _ = parse_text_tool_calls('<tool_call>{"name": "submit", "parameters": {}}')  # unclosed, Llama keys
    assert calls[0].name == "submit"
    calls, _, errors = parse_text_tool_calls("<tool_call>{oops}</tool_call>")
    assert not calls and "not valid JSON" in errors[0]
    assert parse_text_tool_calls("plain answer") == ([], "plain answer", [])


def test_collector_keeps_head_and_tail():
    c = Collector(200)
    for i in range(1000):
        c.feed(f"{i:04d}\n".encode())
    head, tail, cut = c.result()
    assert head.startswith("0000\n") and tail.endswith("0999\n")
    assert len(head) == len(tail) == 100 and cut == 5000 - 200 and c.chars == 5000
    small = Collector(100)
    small.feed(b"abc")
    assert small.result() == ("abc", "", 0)


def test_collector_never_splits_utf8():
    c = Collector(10_000)
    data = "é✓😀".encode() * 10
    for i in range(len(data)):  # byte by byte: a character arrives in pieces
        c.feed(data[i:i + 1])
    assert c.result()[0] == "é✓😀" * 10


def test_shrink_max_tokens_from_vllm_message():
    msg = ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
           "(3000 in the messages, 2000 in the completion).")
    assert shrink_max_tokens(msg, 2000) == 4096 - 3000 - 8
    too_long = ("This model's maximum context length is 4096 tokens. However, you requested 4500 tokens "
                "(4095 in the messages, 405 in the completion).")
    assert shrink_max_tokens(too_long, 405) is None  # the prompt alone does not fit: stop
    assert shrink_max_tokens("context length exceeded", 1000) == 500  # no numbers: halve
    assert shrink_max_tokens("context length exceeded", None) is None


def test_prompt_config_fills_placeholders_literally(tmp_path):
    cfg = load_prompt_config()
    msgs = cfg.sandbox_messages("Find x in \\boxed{x} and {not_a_placeholder}")
    assert msgs[0]["role"] == "system" and "/testbed/output" in msgs[0]["content"]
    assert "{working_dir}" not in msgs[0]["content"]
    assert "\\boxed{x} and {not_a_placeholder}" in msgs[1]["content"]
    ref_style = tmp_path / "ref.yaml"  # the reference implementation's keys load as they are
    ref_style.write_text("system_prompt: |-\n  Work in {working_dir}.\ninstance_prompt: |-\n  <problem>\n"
                         "  {problem_statement}\n  </problem>\ninput_dir: /testbed/documents\n")
    cfg = load_prompt_config(ref_style)
    assert cfg.input_dir == "/testbed/documents"
    assert cfg.sandbox_messages("Q")[1]["content"] == "<problem>\nQ\n</problem>"
    assert cfg.llm_messages("Q")[-1]["content"] == "Q"  # plain mode falls back to the default template
    bad = tmp_path / "bad.yaml"
    bad.write_text("system_prompt: x\n")
    with pytest.raises(ValueError, match="instance_prompt"):
        load_prompt_config(bad)


def test_extract_safely_refuses_escapes(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("output/ok/a.txt", b"fine"), ("output/../../evil.txt", b"bad")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("output/link")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    buf.seek(0)
    written, skipped = extract_safely(buf, tmp_path / "dest")
    assert written == ["ok/a.txt"] and sorted(skipped) == ["../../evil.txt", "link"]
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path.parent / "evil.txt").exists()


def test_cleanup_only_takes_what_is_safe():
    me = f"{socket.gethostname()}:{os.getpid()}"
    dead = f"{socket.gethostname()}:999999999"
    other_host = "some-other-host:1"
    assert leftover_reason({"State": "exited", "Labels": {LABEL_OWNER: me}}, False) == "not running"
    assert leftover_reason({"State": "running", "Labels": {LABEL_OWNER: me}}, False) == ""
    assert "gone" in leftover_reason({"State": "running", "Labels": {LABEL_OWNER: dead}}, False)
    assert leftover_reason({"State": "running", "Labels": {LABEL_OWNER: other_host}}, False) == ""
    assert leftover_reason({"State": "running", "Labels": {LABEL_OWNER: other_host}}, True) == "--all"
