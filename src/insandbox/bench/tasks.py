"""Benchmark tasks: a YAML file with the data source, the prompts of both modes, the scorer
and the number of repeats. The built-in tasks live in tasks/*.yaml; a user's own task is
the same kind of file, passed by path (`insandbox bench my_task.yaml --data rows.jsonl`).

    name: my_task
    extends: _base            # optional: start from the shared built-in settings
    dataset: org/name         # optional hub dataset (with config, split), else --data
    repeats: 1
    scorer: exact             # math | choice | ifbench | judge | exact | rouge | module:function
    offline_scorer: rouge     # for `judge`, when no judge model is given
    input_dir: /testbed/documents
    system_prompt: ...        # sandbox mode; {working_dir} {input_dir} {output_dir}
    instance_prompt: ...      # + {problem_statement}
    llm_system_prompt: ...    # plain mode
    llm_instance_prompt: ...  # + {documents} (the input files, else appended)
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..core.errors import ConfigError
from ..core.yaml_file import read_yaml
from ..prompts import PromptConfig

BUILTIN_DIR = Path(__file__).parent / "tasks"


class TaskSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    dataset: Optional[str] = None
    config: Optional[str] = None
    split: str = "test"
    repeats: int = Field(default=1, ge=1)
    scorer: str = "exact"
    offline_scorer: Optional[str] = None
    max_steps: Optional[int] = None
    working_dir: str = "/testbed"
    input_dir: str = "/testbed/documents"
    output_dir: str = "/testbed/output"
    system_prompt: str
    instance_prompt: str
    llm_system_prompt: Optional[str] = None
    llm_instance_prompt: Optional[str] = None
    source: str = ""  # the file it came from
    harbor: Optional[str] = None  # a Harbor task folder: its rows, and its verifier is the scorer (bench/harbor/)

    def prompts(self) -> PromptConfig:
        return PromptConfig(system_prompt=self.system_prompt, instance_prompt=self.instance_prompt,
                            working_dir=self.working_dir, input_dir=self.input_dir, output_dir=self.output_dir,
                            llm_system_prompt=self.llm_system_prompt,
                            llm_instance_prompt=self.llm_instance_prompt or "{problem_statement}")


def builtin_tasks() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml") if not p.stem.startswith("_"))


def _read(path: Path, seen: tuple = ()) -> dict:
    data = read_yaml(path, "task") or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a task config is a YAML mapping")
    parent = data.pop("extends", None)
    if parent:
        base = BUILTIN_DIR / f"{parent}.yaml"
        if not base.is_file():
            base = (path.parent / parent).with_suffix(".yaml")
        if base in seen or not base.is_file():
            raise ValueError(f"{path}: cannot extend {parent!r}")
        data = {**_read(base, seen + (base,)), **data}
    return data


def load_task(name_or_path: Union[str, Path]) -> TaskSpec:
    """A built-in task by name, or a task YAML file by path."""
    p = Path(name_or_path)
    if not p.suffix and not p.exists():
        p = BUILTIN_DIR / f"{name_or_path}.yaml"
        if not p.is_file():
            raise ValueError(f"unknown task {name_or_path!r}; built-in tasks: {', '.join(builtin_tasks())}, "
                             "or pass a task YAML file")
    if not p.is_file():
        raise ValueError(f"task config not found: {p}")
    data = _read(p)
    data.setdefault("name", p.stem)
    data["source"] = str(p)
    try:
        return TaskSpec(**data)
    except ValidationError as e:  # one line: each key with what is wrong with it
        wrong = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'task'}: {err['msg']}" for err in e.errors())
        raise ConfigError(f"task {p}: {wrong}") from None
