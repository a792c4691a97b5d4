"""Targets for worker-pool tests: functions that hang, crash or raise inside a worker process."""
from __future__ import annotations

import os
import re
import time


def echo(value):
    return value


def pid() -> int:
    return os.getpid()


def hold_the_gil() -> bool:
    # catastrophic backtracking: the regex engine runs for ages without releasing the GIL
    return re.match(r"(a+)+$", "a" * 64 + "b") is not None


def sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def crash() -> None:
    os._exit(3)


def fail() -> None:
    raise ValueError("broken row")


def unserialisable() -> object:
    return object()


def noisy(value):
    print("a library printing to stdout")
    os.write(1, b"and one writing to file descriptor 1\n")
    return value


def cpu_limit() -> list:
    import resource

    return list(resource.getrlimit(resource.RLIMIT_CPU))


def dispatch(name: str, *args):
    """One target for all of the above, so one pool serves a whole test."""
    return globals()[name](*args)
