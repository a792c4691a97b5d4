"""insandbox: give a language model a computer.

    import insandbox
    result = insandbox.run("Compute the 100th prime", model="qwen3", base_url="http://localhost:8000/v1")
    print(result.answer, result.run_dir)

`arun` is the same call for asyncio code; many runs can share one event loop.
`SandboxEnv` is the environment on its own (reset / step / close) for RL trainers.
"""
from importlib import import_module
from typing import Any

__version__ = "0.2.0"  # the package version (pyproject.toml reads it from here)

_EXPORTS = {
    "run": "insandbox.runs.session", "arun": "insandbox.runs.session", "RunResult": "insandbox.runs.session",
    "RunConfig": "insandbox.config", "ConfigError": "insandbox.config",
    "SandboxEnv": "insandbox.agent.env", "EnvConfig": "insandbox.agent.env", "Task": "insandbox.agent.env",
    "StepResult": "insandbox.agent.env", "Trajectory": "insandbox.core.trajectory",
    "ExitReason": "insandbox.core.episode", "Limits": "insandbox.core.episode",
    "OpenAIChatClient": "insandbox.models", "ModelClient": "insandbox.models",
    "ScriptedServer": "insandbox.models.scripted_server", "ToolCall": "insandbox.tools",
    "load_prompt_config": "insandbox.prompts", "PromptConfig": "insandbox.prompts",
    # the error tree (core/errors.py): catch InsandboxError for all of them, or one branch
    "InsandboxError": "insandbox.core.errors", "DataError": "insandbox.core.errors",
    "SandboxError": "insandbox.core.errors", "ModelError": "insandbox.core.errors",
}


def __getattr__(name: str) -> Any:  # imported on first use: `import insandbox` stays cheap
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'insandbox' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
