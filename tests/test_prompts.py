"""Pure functions: schemas, argument parsing, text tool calls, output clipping, prompts, archives."""
from __future__ import annotations

import pytest

from insandbox.prompts import load_prompt_config


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

