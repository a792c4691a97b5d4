"""What a recorded run may ask of this machine: nothing beyond the defaults unless the user says so.

A run folder records the sandbox settings it ran with, and replay and fork start their sandboxes
with them. Whoever wrote the folder could have written anything there, so a recorded setting that
gives the sandbox more than `insandbox run` gives it by default (another network than bridge, none
or registries, capabilities, a runtime, another image, higher or no resource and copy-back limits)
is refused unless the command line gives that option itself; what the command line gives is used
and shown. A recorded setting at or under the default is used as recorded.

A fork's model is checked the same way. Without --base-url (or --gguf) it asks no server that a run
folder names, not even one on this machine: whoever listens on a recorded loopback port now (another
user, on a port that was free when the run was made) would get the conversation and whatever
credentials the model client finds in this environment (the API key, and what the SDKs read there
themselves: tokens, extra headers, organisation). Only the embedded model, when the run had it, or, for a
run that recorded no server, this user's own default (INSANDBOX_BASE_URL, else the provider's) is
used without it. What the run spends of the user's account is not the folder's to raise either: a
recorded extra_body (it can name another model, or ask for many replies at once) and a step limit
above the default are refused unless --extra-body / --max-steps give them.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Optional

from ..config import DEFAULT_IMAGE, RunConfig
from ..core.units import format_size, parse_size
from ..runs.safe_files import UnsafeRunFolder

SAFE_NETWORKS = ("bridge", "none", "registries")


def _over(limit: Optional[float], default: Optional[float]) -> bool:
    """A limit looser than the default (None: no limit at all)."""
    return limit is None or (default is not None and limit > default)


def _mem(v: Optional[str]) -> Optional[int]:
    """A recorded size in bytes (a run folder holds text; RunConfig checks it once the grants pass)."""
    return None if v is None else parse_size(v)


_D = RunConfig()
_D_LIMITS = _D.sandbox_limits()  # the default memory and disk in bytes
# setting -> (does this value ask for more than the default?, the option that gives it)
CHECKED: dict[str, tuple[Callable[[Any], bool], Callable[[Any], str]]] = {
    "image": (lambda v: v != DEFAULT_IMAGE, lambda v: f"--image {v}"),
    "network": (lambda v: v not in SAFE_NETWORKS, lambda v: f"--network {v}"),
    "cap_add": (lambda v: bool(v), lambda v: " ".join(f"--cap-add {c}" for c in (v if isinstance(v, list) else [v]))),
    "runtime": (lambda v: v is not None, lambda v: f"--runtime {v}"),
    "memory": (lambda v: _over(_mem(v), _D_LIMITS.memory_bytes), lambda v: f"--memory {v or 'none'}"),
    "cpus": (lambda v: _over(v, _D.cpus), lambda v: f"--cpus {v or 0}"),
    "pids_limit": (lambda v: _over(v, _D.pids_limit), lambda v: f"--pids-limit {v or 0}"),
    "disk": (lambda v: _over(_mem(v), _D_LIMITS.disk_bytes), lambda v: f"--disk {v or 'none'}"),
    "output_max_file_bytes": (lambda v: _over(v, _D.output_max_file_bytes),
                              lambda v: f"--max-output-file-size {format_size(v)}"),
    "output_max_bytes": (lambda v: _over(v, _D.output_max_bytes), lambda v: f"--max-output-size {format_size(v)}"),
    "output_max_files": (lambda v: _over(v, _D.output_max_files), lambda v: f"--max-output-files {v or 0}"),
}
# recorded settings taken over as they are: they act inside the sandbox or on the model's replies only
AS_RECORDED = ("timeout_per_command", "output_limit", "env", "max_steps", "token_budget", "time_limit",
               "stuck_after", "max_tool_calls_per_reply", "provider", "model", "base_url", "temperature", "max_tokens",
               "extra_body", "max_retries", "request_timeout", "send_reasoning", "tool_choice", "tool_format",
               "stream", "stall_timeout", "logprobs", "top_logprobs", "thinking_budget", "prompt_caching")


def sandbox_settings(config: dict, given: Optional[dict] = None) -> tuple[dict, list[str]]:
    """The settings a replay or fork takes from a recorded `config`, with the command line's sandbox
    settings (`given`: RunConfig fields, only those given; None is "no limit") laid over them, and the options shown as
    granted from the command line. Every other recorded key is dropped: host paths (input and output
    folders, prompt config, GGUF, prices, runs root), the backend, the embedded server's context.
    UnsafeRunFolder (one line) when the record asks for more than the defaults and `given` does not."""
    given = {k: v for k, v in (given or {}).items() if k in CHECKED}  # present: given (None: no limit)
    out = {k: config[k] for k in AS_RECORDED if k in config}
    asked = []
    for key, (more, option) in CHECKED.items():
        if key in given:
            out[key] = given[key]
        elif key in config:
            try:
                if more(config[key]):
                    asked.append(option(config[key]))
                    continue
            except (TypeError, ValueError):  # not even a value of the right kind: validation says what
                pass
            out[key] = config[key]
    if asked:
        raise UnsafeRunFolder(f"the run folder asks for {' '.join(asked)}; a run folder grants nothing by itself: "
                              "pass the same options to grant them (or others to replace them)")
    granted = [option(given[k]) for k, (more, option) in CHECKED.items() if k in given and more(given[k])]
    return out, granted


def check_model_server(recorded_base_url: Optional[str], overrides: dict) -> None:
    """A fork without --base-url or --gguf goes to no server the run folder names (module docstring):
    the embedded model and a run that recorded none pass, any recorded URL is refused (UnsafeRunFolder)."""
    if overrides.get("base_url") is not None or overrides.get("gguf") is not None:
        return
    url = recorded_base_url
    if url is None or url == "embedded":
        return
    text = str(url) if len(str(url)) <= 200 else str(url)[:200] + "..."  # a record's URL can be any length
    if isinstance(url, str) and "***" in url:  # the run held a credential there, which was never stored
        raise UnsafeRunFolder(f"the recorded --base-url held a credential, which insandbox never stores ({text}): "
                              "pass --base-url to give it again")
    raise UnsafeRunFolder(f"the run used the model server {text!r}: a fork sends the conversation and your "
                          "credentials only where --base-url says, never to a server a run folder names, even on "
                          "this machine (someone else may listen on that port now); pass --base-url (the same "
                          "URL if that server is yours)")


def check_spending(recorded: dict, overrides: dict) -> None:
    """The recorded model settings that would spend more of the user's account than `insandbox run`'s
    defaults, refused unless the command line gives them (UnsafeRunFolder, as sandbox_settings)."""
    given = {k for k, v in overrides.items() if v is not None}
    asked = []
    if recorded.get("extra_body") and "extra_body" not in given:
        body = json.dumps(recorded["extra_body"], ensure_ascii=False)
        asked.append(f"--extra-body '{body}'" if len(body) <= 200 else f"--extra-body (its {len(body):,} characters)")
    steps = recorded.get("max_steps")
    if isinstance(steps, int) and steps > _D.max_steps and "max_steps" not in given:
        asked.append(f"--max-steps {steps}")
    if asked:
        raise UnsafeRunFolder(f"the run folder asks for {' '.join(asked)}; a run folder grants nothing by itself: "
                              "pass the same options to grant them (or others to replace them)")
