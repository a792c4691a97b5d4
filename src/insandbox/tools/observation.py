"""What a tool's output may carry to the model server.

Command output can hold any byte: `head -c 5M /dev/urandom` gives NULs, bells and escape codes,
and text decoded with `surrogateescape` can hold lone surrogates. Some model servers reject a
request with a NUL in it, and no JSON encoder can write a lone surrogate as UTF-8. So every
observation passes through `clean_observation` (in ToolBox.call, the one place outputs leave the
tools): terminal colour and cursor sequences are removed, every other control character but tab,
newline and carriage return, and every lone surrogate, becomes U+FFFD, and a last line says how
many were replaced, so the model knows the output was not shown byte for byte.
"""
from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
# ANSI CSI sequences (colours, cursor moves: ESC [ params final-byte) and OSC titles (ESC ] ... BEL/ST)
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
# C0 controls but \t \n \r, DEL, C1 controls, lone surrogates
_UNSENDABLE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def clean_observation(text: str) -> tuple[str, int, int]:
    """(text fit to send, escape sequences removed, characters replaced with U+FFFD)."""
    text, removed = _ANSI.subn("", text)
    text, replaced = _UNSENDABLE.subn(REPLACEMENT, text)
    if removed or replaced:
        parts = []
        if replaced:
            parts.append(f"{replaced:,} control character{'s' if replaced != 1 else ''} (NUL and the like) "
                         f"replaced with {REPLACEMENT}")
        if removed:
            parts.append(f"{removed:,} terminal escape sequence{'s' if removed != 1 else ''} removed")
        text = f"{text.rstrip(chr(10))}\n[insandbox: {'; '.join(parts)}: the output held bytes that are not text]"
    return text, removed, replaced
