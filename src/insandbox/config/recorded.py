"""Recorded settings that lost a credential to redaction (core/redact.py): refused, or given again."""
from __future__ import annotations

import json

from ..core.errors import ConfigError
from ..core.redact import fits, is_redacted, redact


def refuse_redacted(settings: dict, flags: dict[str, str]) -> None:
    """A ConfigError when a recorded setting (key of `flags`) lost a credential to redaction: sent as
    recorded it would fail in a confusing way, so the user must give it again with its flag."""
    for key, flag in flags.items():
        if is_redacted(settings.get(key)):
            raise ConfigError(f"the recorded {flag} held a credential, which insandbox never stores "
                              f"({_shown(settings.get(key))}): give it again with {flag}")


def restored(recorded, given, flag: str):
    """A recorded setting, or where its credential was redacted the `given` one that matches it
    (a ConfigError when none is given, or one that differs elsewhere)."""
    if not is_redacted(recorded):
        return recorded
    if given is None:
        refuse_redacted({"v": recorded}, {"v": flag})
    if not fits(recorded, given):
        raise ConfigError(f"{flag} {_shown(given)} is not the recorded {_shown(recorded)} (the run's own settings "
                          "are used: give the same value)")
    return given


def _shown(value) -> str:
    return redact(value) if isinstance(value, str) else json.dumps(redact(value))
