"""Benchmarks: scorers on the dev sets, each task end to end in both modes, resume, the report."""
from __future__ import annotations

import pytest

from insandbox.bench.tasks import builtin_tasks, load_task
from tests.bench.rows import TASKS


def test_builtin_tasks_and_user_task(tmp_path):
    assert builtin_tasks() == sorted(TASKS)
    assert load_task("math").repeats == 16 and load_task("long_context").repeats == 4
    assert load_task("long_context").input_dir == "/testbed/documents"
    mine = tmp_path / "mine.yaml"
    mine.write_text("extends: _base\nscorer: exact\nrepeats: 3\ninstance_prompt: 'Q: {problem_statement}'\n")
    spec = load_task(mine)
    assert spec.name == "mine" and spec.repeats == 3 and "Linux computer" in spec.system_prompt
    with pytest.raises(ValueError, match="unknown task"):
        load_task("nope")

