"""Text from the sandbox or the model, made safe to show: every control character and lone surrogate
written out, rich markup shown as text, a call summed up in one line. Everything insandbox prints of
such text goes through here (`shown()`, or `escape_controls()` where no rich markup is involved):
escape sequences that clear the screen, write the clipboard with OSC 52 or set the title are never
sent to the operator's terminal; lone surrogates (valid JSON, "\\ud800", but no character: no
terminal encoding can write them) are written out.
"""
from __future__ import annotations

import json
import re

from rich.markup import escape

from .trajectory import ToolCallRecord

PREVIEW_LINES = 8
# C0 controls except tab and newline, DEL, C1 controls; bidirectional overrides, which reorder what is shown;
# and surrogates, which are no characters (from JSON's "\\ud800", or undecodable bytes kept by surrogateescape)
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _written_out(ch: str) -> str:
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (os.fsdecode, surrogateescape): shown as that byte
        return f"\\x{code - 0xDC00:02x}"
    return ch.encode("unicode_escape").decode("ascii")  # \\x1b, \\u202e, \\ud800


def escape_controls(text: str) -> str:
    """Text with every control character and lone surrogate written out (\\x1b, \\r, \\ud800, ...),
    undecodable bytes as \\xNN: printable by any terminal or pipe. Never raises."""
    return _UNPRINTABLE.sub(lambda m: _written_out(m.group()), text) if text else ""


def shown(text: object) -> str:
    """Untrusted text, safe to print through rich."""
    return escape(escape_controls(str(text)))


def _clip_lines(text: str, n: int = PREVIEW_LINES, width: int = 160) -> tuple[list[str], int]:
    lines = [ln.removesuffix("\r") for ln in text.split("\n")]  # CRLF output reads as lines, other \r is shown
    return [ln if len(ln) <= width else ln[:width] + "…" for ln in lines[:n]], max(len(lines) - n, 0)


def describe_call(call: ToolCallRecord) -> str:
    """A one-line summary of a call: the command, or the editor operation."""
    try:
        args = json.loads(call.arguments or "{}")
    except ValueError:
        args = None
    if not isinstance(args, dict):
        return f"{call.name} (unreadable arguments)"
    if call.name == "execute_bash":
        lines, more = _clip_lines(str(args.get("command", "")).strip(), 6)
        return "$ " + "\n  ".join(lines) + (f"\n  … ({more} more lines)" if more else "")
    if call.name == "str_replace_editor":
        return f"✎ {args.get('command', '?')} {args.get('path', '')}"
    if call.name == "submit":
        return "✔ submit"
    return f"{call.name} {call.arguments[:120]}"
