"""Harbor task folders for the tests, written the way task authors write them (task.toml,
instruction.md, environment/Dockerfile or a named image, tests/test.sh, solution/solve.sh)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

# test.sh of the "reverse" task: full marks when /app/out.txt holds data.txt reversed, else 0
REVERSE_TEST = """#!/bin/bash
if [ "$(cat /app/out.txt 2>/dev/null)" = "$(rev /app/data.txt)" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
RIGHT = "rev /app/data.txt > /app/out.txt"
WRONG = "echo nope > /app/out.txt"


def write_task(root: Path, name: str, *, toml: str = "", test: str = REVERSE_TEST, image: Optional[str] = None,
               instruction: Optional[str] = None, solve: Optional[str] = RIGHT, data: str = "hello harbor") -> Path:
    """A task folder `root/name`: the "reverse" task unless told otherwise. With `image`, the task names
    that image (and copies data.txt in its test instead of a Dockerfile)."""
    task = root / name
    (task / "tests").mkdir(parents=True)
    env = "[environment]\n"
    if image:
        env += f'docker_image = "{image}"\nworkdir = "/app"\n'
    (task / "task.toml").write_text(f'version = "1.0"\n{toml}\n' + ("" if "[environment]" in toml else env))
    (task / "instruction.md").write_text(instruction or f"Task {name}: reverse the text in /app/data.txt and write "
                                                        "it to /app/out.txt.\n")
    if not image:
        (task / "environment").mkdir()
        (task / "environment" / "Dockerfile").write_text("FROM insandbox:latest\nWORKDIR /app\nCOPY data.txt "
                                                         "/app/data.txt\n")
        (task / "environment" / "data.txt").write_text(data)
    (task / "tests" / "test.sh").write_text(test)
    if solve is not None:
        (task / "solution").mkdir()
        (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve}\n")
    return task


def bash(command: str) -> dict:
    return {"tool": "execute_bash", "args": {"command": command}}


def model(*turns_by_task: tuple[str, list]) -> dict:
    """A scripted model: for the task whose instruction names `name`, these turns, then submit."""
    return {"scripts": [{"match": f"Task {name}:", "turns": [bash(t) if isinstance(t, str) else t for t in turns]
                         + [{"tool": "submit"}]} for name, turns in turns_by_task]}
