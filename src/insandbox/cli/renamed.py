"""Options renamed so that one name means one thing in every command. The old names still work for one
release (until 0.3): each is rewritten to its new name before the command reads its arguments, with
a one-line note on stderr; --help shows only the new ones. docs/reference/renamed-options.md lists them.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

import typer

GONE_IN = "0.3"

# command -> {old name: (new name, why)}; a new name of None: the flag said what is the default anyway
RENAMED: dict[str, dict[str, tuple[Optional[str], str]]] = {
    "run": {"--output-dir": ("--out", "where a command writes what it makes is --out everywhere")},
    "bench": {"--output-dir": ("--out", "where a command writes what it makes is --out everywhere")},
    "fork": {"--output-dir": ("--out", "where a command writes what it makes is --out everywhere"),
             "--n": ("--branches", "says what it counts")},
    "replay": {"--json": ("--out", "--json is a flag that prints JSON on stdout (run, fork); this is a file")},
    "report": {"--pool": ("--merge", "--pool is the pool of started sandboxes (bench)")},
    "rl rollout": {
        "--model": ("--policy", "--model is a model server's model name (run, bench, fork)"),
        "--max-turns": ("--max-steps", "model calls per episode are --max-steps (run, bench, fork)"),
        "--max-tokens-per-turn": ("--max-tokens", "tokens per model call are --max-tokens (run, bench, fork)"),
        "--timeout": ("--time-limit", "seconds per episode are --time-limit (run, bench)"),
        "--open": ("--open-answer", "--open opens a browser (view)"),
        "--n": ("--repeats", "samples per row are --repeats (bench)"),
    },
    "rl train": {"--max-steps": ("--train-steps", "--max-steps is model calls per episode (run, rl rollout)"),
                 "--model": ("--policy", "--model is a model server's model name (run, bench, fork)")},
    "rl build-data": {"--limit": ("--per-source", "--limit is the first N rows (bench, rl rollout, rl train)")},
    "image build": {"--tag": ("--image", "the sandbox image is --image everywhere"),
                    "--no-no-cache": (None, "the default")},
    "image build-proxy": {"--no-no-cache": (None, "the default")},
    "image status": {"--tag": ("--image", "the sandbox image is --image everywhere")},
    "clean": {"--no-dry-run": (None, "the default")},
}


def rewrite(command: str, args: list[str], takes_value: Iterable[str]) -> list[str]:
    """`args` with the command's old option names replaced by the new ones (each said once on stderr).
    `takes_value`: the command's option names that take a value, whose value is never read as a name."""
    renamed = RENAMED.get(command)
    if not renamed:
        return args
    takes_value = set(takes_value)
    out: list[str] = []
    said: set[str] = set()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":  # what follows is arguments, whatever it looks like
            out += args[i:]
            break
        name, eq, value = arg.partition("=")
        if name in renamed:
            new, _ = renamed[name]
            if name not in said:
                said.add(name)
                typer.echo(f"insandbox: {name} is now {new} (the old name goes in {GONE_IN})" if new else
                           f"insandbox: {name} is the default; leave it out (it goes in {GONE_IN})", err=True)
            if new:
                out.append(new + eq + value)
                name = new
        else:
            out.append(arg)
        i += 1
        if name in takes_value and not eq and i < len(args):  # its value, taken as it is
            out.append(args[i])
            i += 1
    return out


def table() -> list[tuple[str, str, str, str]]:
    """(command, old, new, why) for every renamed option, in the order above."""
    return [(command, old, new or "(none: leave it out)", why) for command, names in RENAMED.items()
            for old, (new, why) in names.items()]


def markdown() -> str:
    """docs/reference/renamed-options.md, made from RENAMED (a test checks the page is this)."""
    lines = ["# Renamed options", "",
             f"One name, one meaning, in every command. These options were renamed after 0.2.0; the old names still "
             f"work until {GONE_IN}, each with a one-line note on stderr, and `--help` shows only the new ones.", "",
             "| command | old | new | why |", "|---|---|---|---|"]
    lines += [f"| `insandbox {command}` | `{old}` | {f'`{new}`' if new.startswith('--') else new} | {why} |"
              for command, old, new, why in table()]
    lines += ["", "The Python API renamed three `RolloutConfig` settings the same way (the old names are accepted, "
              f"with a `DeprecationWarning`, until {GONE_IN}; so are they in an `rl train` config's `rollout:` "
              "section):", "", "| old | new |", "|---|---|", "| `max_turns` | `max_steps` |",
              "| `max_tokens_per_turn` | `max_tokens` |", "| `timeout_s` | `time_limit` |", ""]
    return "\n".join(lines)
