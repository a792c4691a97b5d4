"""One error tree: every exception class insandbox defines derives from InsandboxError, one ConfigError,
each class keeps the builtin base its callers catch it by, and each branch names its exit status."""
from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil

import pytest

import insandbox
from insandbox.core import errors

# classes left outside the tree on purpose, with the reason (none today: a new one must say why here)
OUTSIDE_THE_TREE: dict[str, str] = {}

# builtin bases that callers rely on (`except ValueError`, pydantic validators, `except OSError`...)
KEPT_BASES = {
    "insandbox.core.errors.ConfigError": ValueError,  # pydantic turns a validator's ValueError into its error
    "insandbox.core.errors.DataError": ValueError,
    "insandbox.core.errors.SandboxError": RuntimeError,
    "insandbox.core.errors.ModelError": RuntimeError,
    "insandbox.tools.base.ToolArgumentError": ValueError,
    "insandbox.core.model_json.ModelJSONError": ValueError,
    "insandbox.models.local_server.LocalModelMissing": RuntimeError,
    "insandbox.models.scripted_anthropic.InvalidRequest": ValueError,
    "insandbox.viewer.files.BadPath": ValueError,
    "insandbox.viewer.app.CannotListen": OSError,
    "insandbox.sandbox.docker.recycle.RestoreError": OSError,  # caught as `except (OSError, RestoreError)`
    "insandbox.core.extras.MissingExtra": ModuleNotFoundError,  # missing_need reads its `name`
    "insandbox.bench.sample.BenchAborted": RuntimeError,
    "insandbox.distributed.cluster.NoNodesLeft": RuntimeError,
    "insandbox.distributed.processes.WorkerDied": RuntimeError,
    "insandbox.rl.trainers.export.ExportError": RuntimeError,
}


@functools.lru_cache(maxsize=1)
def exception_classes() -> dict[str, type]:
    """Every exception class defined at the top of a module of the package, by its full name."""
    found = {}
    for info in pkgutil.walk_packages(insandbox.__path__, "insandbox."):
        if info.name.endswith("__main__"):  # runs the command line
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def test_every_exception_class_derives_from_insandbox_error():
    classes = exception_classes()
    assert len(classes) >= 45  # the walk reached the whole package (51 when the tree was made)
    outside = sorted(name for name, cls in classes.items() if not issubclass(cls, errors.InsandboxError))
    assert outside == sorted(OUTSIDE_THE_TREE)
    assert insandbox.InsandboxError is errors.InsandboxError  # re-exported from the package


def test_there_is_one_config_error():
    named = {cls for name, cls in exception_classes().items() if cls.__name__ == "ConfigError"}
    assert named == {errors.ConfigError}
    from insandbox.config import ConfigError as run_config_error
    from insandbox.rl.trainers.config import ConfigError as training_config_error

    assert insandbox.ConfigError is run_config_error is training_config_error is errors.ConfigError


@pytest.mark.parametrize("name", sorted(KEPT_BASES))
def test_each_class_keeps_the_builtin_base_its_callers_catch(name):
    assert issubclass(exception_classes()[name], KEPT_BASES[name])


def test_callers_that_catch_value_error_still_catch_the_data_errors(tmp_path):
    """The viewer reads a damaged trajectory.json through `except (OSError, ValueError)`: BadJSON, now a
    DataError, still lands there and becomes the viewer's own one-line error."""
    from insandbox.viewer.trajectories import TrajectoryCache, UnreadableTrajectory

    path = tmp_path / "trajectory.json"
    path.write_text('{"run_id": "r", "steps": [')
    with pytest.raises(UnreadableTrajectory, match="cannot be read as a trajectory") as caught:
        TrajectoryCache().get(path)
    assert isinstance(caught.value, errors.DataError)


def test_each_class_sits_in_its_branch():
    branch_of = {
        errors.ConfigError: ["insandbox.cli.common.BadArgument", "insandbox.core.errors.SetupError",
                             "insandbox.sandbox.docker.image.ImageNotFound", "insandbox.sandbox.admission.TasksRefused",
                             "insandbox.models.local_server.LocalModelMissing",
                             "insandbox.rl.rollout.chat.ChatTemplateError", "insandbox.viewer.app.CannotListen"],
        errors.DataError: ["insandbox.core.json_input.BadJSON", "insandbox.rl.data.sources.reader.SourceError",
                           "insandbox.replay.replayer.ReplayError", "insandbox.runs.inputs.InputsMissing",
                           "insandbox.runs.safe_files.UnsafeRunFolder",
                           "insandbox.runs.trajectory_budget.TrajectoryTooCostly",
                           "insandbox.viewer.trajectories.UnreadableTrajectory", "insandbox.viewer.midi.MidiError"],
        errors.SandboxError: ["insandbox.core.errors.SandboxBrokenByItself", "insandbox.sandbox.channel.ServerSilent"],
        errors.ModelError: ["insandbox.core.errors.ContextLengthError", "insandbox.models.base.ContextFull",
                            "insandbox.models.anthropic_messages.ModelRefused"],
        errors.ToolError: ["insandbox.sandbox.base.OperationError", "insandbox.sandbox.base.SandboxFileError",
                           "insandbox.sandbox.base.ServerError", "insandbox.tools.base.ToolArgumentError",
                           "insandbox.core.model_json.ModelJSONError"],
    }
    classes = exception_classes()
    for branch, names in branch_of.items():
        for name in names:
            assert issubclass(classes[name], branch), name
    # a sandbox that cannot be set up is a bad setting, never the infrastructure failing
    assert not issubclass(errors.SetupError, errors.SandboxError)
    assert not issubclass(errors.DataError, errors.ConfigError) and not issubclass(errors.ConfigError, errors.DataError)


def test_each_branch_names_its_exit_status():
    from insandbox.bench.sample import EngineOutage
    from insandbox.cli.common import exit_code_of
    from insandbox.models.retrying import StreamStalled
    from insandbox.sandbox.base import SandboxFileError

    assert exit_code_of(errors.ConfigError("x")) == exit_code_of(errors.SetupError("x")) == 2
    assert exit_code_of(errors.DataError("x")) == 2
    assert exit_code_of(errors.SandboxError("x")) == exit_code_of(errors.ModelError("x")) == 1
    assert exit_code_of(EngineOutage("x")) == 1
    # told to the model, or caught where raised: reaching the command line is a bug (a traceback)
    assert exit_code_of(SandboxFileError("x")) is None and exit_code_of(StreamStalled("x")) is None
    assert exit_code_of(KeyError("x")) is None
    # a command's own `bad` and `failed` exceptions come first
    assert exit_code_of(ValueError("x"), bad=(ValueError,)) == 2
    assert exit_code_of(errors.ModelError("x"), bad=(RuntimeError,)) == 2
    assert exit_code_of(OSError("x"), failed=(OSError,)) == 1


def test_the_episode_maps_the_branches_to_exit_reasons():
    from insandbox.core.episode import Episode, ExitReason
    from insandbox.models.base import ContextFull

    for error, reason in ((errors.ContextLengthError("x"), ExitReason.CONTEXT_LENGTH),
                          (ContextFull("x"), ExitReason.CONTEXT_LENGTH),
                          (errors.ModelError("x"), ExitReason.MODEL_ERROR),
                          (errors.SandboxError("x"), ExitReason.SANDBOX_ERROR),
                          (errors.SetupError("x"), ExitReason.SANDBOX_ERROR),
                          (errors.ConfigError("x"), ExitReason.INTERNAL_ERROR)):
        assert Episode().end_on_error(error) is reason, error
