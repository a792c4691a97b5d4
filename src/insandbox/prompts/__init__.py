"""Prompt configs: YAML files with system and instance templates.

The keys follow the reference implementation's configs (system_prompt, instance_prompt,
working_dir, input_dir, output_dir), so its YAML files load as they are; we add
llm_system_prompt / llm_instance_prompt for plain (tool-less) mode.
"""
from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Optional, Union

from pydantic import BaseModel, ConfigDict

DEFAULT_PATH = Path(__file__).parent / "default.yaml"
PLACEHOLDERS = ("working_dir", "input_dir", "output_dir", "problem_statement")


class PromptConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    system_prompt: str
    instance_prompt: str
    working_dir: str = "/testbed"
    input_dir: str = "/testbed/input"
    output_dir: str = "/testbed/output"
    llm_system_prompt: Optional[str] = None
    llm_instance_prompt: Optional[str] = None

    def fill(self, template: str, problem_statement: str = "") -> str:
        values = {"working_dir": self.working_dir, "input_dir": self.input_dir, "output_dir": self.output_dir}
        for key, value in values.items():
            template = template.replace("{" + key + "}", value)
        # the problem statement last, so braces inside it are never treated as placeholders
        return template.replace("{problem_statement}", problem_statement)

    def sandbox_messages(self, problem_statement: str) -> list[dict]:
        return [{"role": "system", "content": self.fill(self.system_prompt)},
                {"role": "user", "content": self.fill(self.instance_prompt, problem_statement)}]

    def llm_messages(self, problem_statement: str, documents: str = "") -> list[dict]:
        """Plain mode. The input files' text goes where the template says {documents},
        else after the problem statement."""
        default = _default_config()
        system = self.llm_system_prompt if self.llm_system_prompt is not None else default.llm_system_prompt
        instance = self.llm_instance_prompt or default.llm_instance_prompt or "{problem_statement}"
        if "{documents}" in instance:
            instance = instance.replace("{documents}", documents)
        elif documents:
            problem_statement = f"{problem_statement}\n\n{documents}"
        messages = [{"role": "system", "content": self.fill(system)}] if system else []
        return messages + [{"role": "user", "content": self.fill(instance, problem_statement)}]


@functools.lru_cache(maxsize=1)
def _default_config() -> PromptConfig:
    return load_prompt_config()


@functools.lru_cache(maxsize=32)
def _parsed(path: str, mtime_ns: int, size: int):
    """A prompt file's value, parsed once per content (libyaml's parser where there is one): runs read the
    same file again and again."""
    import yaml

    text = Path(path).read_text(encoding="utf-8")
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _read(p: Path) -> dict:
    import yaml

    if not p.is_file():
        raise FileNotFoundError(f"prompt config not found: {p}")
    try:
        st = p.stat()
        data = copy.deepcopy(_parsed(str(p.resolve()), st.st_mtime_ns, st.st_size)) or {}
    except yaml.YAMLError as e:
        raise ValueError(f"{p}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{p}: a prompt config is a YAML mapping")
    return data


def load_prompt_overrides(path: Union[str, Path]) -> dict:
    """The prompt keys a file sets (any subset), to lay over another config, e.g. a benchmark task's."""
    data = _read(Path(path))
    known = {k: v for k, v in data.items() if k in PromptConfig.model_fields}
    if not known:
        raise ValueError(f"{path}: sets none of {', '.join(PromptConfig.model_fields)}")
    return known


def load_prompt_config(path: Union[str, Path, None] = None, overrides: Optional[dict] = None) -> PromptConfig:
    p = Path(path) if path else DEFAULT_PATH
    data = _read(p)
    missing = [k for k in ("system_prompt", "instance_prompt") if not data.get(k)]
    if missing:
        raise ValueError(f"{p}: missing {', '.join(missing)}")
    data.update(overrides or {})
    return PromptConfig(**data)
