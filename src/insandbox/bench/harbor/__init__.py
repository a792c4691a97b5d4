"""Harbor tasks as benchmarks: `insandbox bench TASK_DIR` (or a dataset folder of task folders).

task.py reads a task folder; environment.py builds its image (cached by content); verifier.py runs
its tests/test.sh after the agent and reads the reward; oracle.py is the agent that runs the task's
own solution; dataset.py turns each task into a benchmark run with the task's limits and network.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from ...core.yaml_file import read_yaml
from ..data import Row
from ..tasks import TaskSpec
from .oracle import SOLUTION_DIR, OracleClient
from .task import HarborTask, is_harbor_path, is_task_folder, load_task, load_tasks
from .verifier import Verification, verify

PROMPTS = Path(__file__).parent / "prompts.yaml"

__all__ = ["HarborTask", "HarborVerifier", "OracleClient", "Verification", "is_harbor_path", "is_task_folder",
           "load_task", "load_tasks", "rows_of", "task_spec"]


def task_spec(task: HarborTask, workdir: str, oracle: bool = False) -> TaskSpec:
    """The benchmark task of a Harbor task: its prompts in its working folder, its verifier as scorer."""
    prompts = read_yaml(PROMPTS, "prompts")
    return TaskSpec(name=task.name, description=f"Harbor task {task.path}", scorer="verifier", working_dir=workdir,
                    input_dir=SOLUTION_DIR if oracle else f"{workdir.rstrip('/')}/.insandbox-input",
                    output_dir=f"{workdir.rstrip('/')}/.insandbox-output",
                    system_prompt=prompts["system_prompt"], instance_prompt=prompts["instance_prompt"],
                    source=str(task.path), harbor=str(task.path))


def rows_of(spec: TaskSpec, oracle: bool = False) -> list[Row]:
    """One row: the instruction; with the oracle, the solution folder goes in as the input."""
    task = load_task(Path(spec.harbor))
    solution: Optional[Path] = None
    if oracle:
        if task.solution_dir is None:
            from ...core.errors import ConfigError
            raise ConfigError(f"task {task.name}: no solution/solve.sh for the oracle agent")
        solution = task.solution_dir
    return [Row(id=task.name, problem_statement=task.instruction, ground_truth="", input_dir=solution)]


class HarborVerifier:
    """The Verify hook of a Harbor task's samples (runs/session.py): its verifier's verdict as a dict."""

    def __init__(self, task_dir: str):
        self.task = load_task(Path(task_dir))

    async def __call__(self, sandbox) -> dict:
        from ...sandbox import SandboxError

        try:
            result = await verify(sandbox, self.task)
        except SandboxError as e:  # the verifier could not even be set up (the sandbox went, a full disk)
            result = Verification(error=f"the verifier could not run: {e}", separate=self.task.verifier.separate)
        return result.as_dict()
