"""str_replace_editor: view, create and edit text files in the sandbox, byte for byte.

Files move through the sandbox's file API (the engine's archive API for Docker), never
through a shell. Text is decoded with `surrogateescape`, so a file that is not valid
UTF-8 still round-trips to the same bytes; tabs, CRLF line ends and a missing final
newline are kept. Only files holding NUL bytes are refused as binary, and only regular
files are read or written (a FIFO or a device would block or never end). Symbolic links
are followed inside the sandbox. One instance per episode: it keeps the undo history.
Errors the model can act on are raised as SandboxFileError / ToolArgumentError; the
ToolBox turns them into the message the model reads.
"""
from __future__ import annotations

import posixpath
from typing import Any, Optional

from ..core import defaults
from ..sandbox.base import FileStat, Sandbox, SandboxFileError
from .base import ToolArgumentError, ToolOutput, as_int, function_schema, require_str

NAME = "str_replace_editor"
COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")
MAX_FILE_BYTES = 64 * 1024 * 1024  # larger files: use the shell
SNIPPET_CONTEXT = 4  # lines shown around an edit
MAX_DIR_ENTRIES = 400


def decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def encode(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # lone surrogates that came from JSON escapes
        return text.encode("utf-8", "replace")


def printable(text: str) -> str:
    """Text safe to show the model (undecodable bytes become U+FFFD)."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def is_binary(data: bytes) -> bool:
    return b"\0" in data[:65536]


def newline_of(text: str) -> str:
    return "\r\n" if text.count("\r\n") * 2 > text.count("\n") else "\n"


def numbered(lines: list[str], first: int) -> str:
    """`cat -n` style, without line terminators (tabs are shown as they are)."""
    return "\n".join(f"{n:6}\t{printable(line.rstrip(chr(10)).rstrip(chr(13)))}" for n, line in
                     enumerate(lines, start=first))


def split_lines(text: str) -> list[str]:
    """Lines with their "\n" kept. Only \n ends a line (str.splitlines would also split on
    form feeds and Unicode separators, and line numbers would drift from grep's)."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


class StrReplaceEditor:
    name = NAME

    def __init__(self, workdir: str = defaults.WORKDIR, view_limit_chars: int = defaults.OUTPUT_LIMIT):
        self.workdir = workdir
        self.view_limit = view_limit_chars
        self.history: dict[str, list[tuple[Optional[bytes], Optional[int]]]] = {}

    def schema(self) -> dict:
        return function_schema(
            NAME,
            "View, create and edit text files (any text: code, data, notes). Commands:\n"
            "- view: show a file with line numbers (optionally only `view_range`), or list a directory "
            "two levels deep.\n"
            "- create: write `file_text` to `path` (parent directories are made; an existing file is "
            "replaced).\n"
            "- str_replace: replace `old_str` by `new_str`; `old_str` must match exactly one place in the "
            "file, whitespace included.\n"
            "- insert: insert `new_str` after line `insert_line` (0 puts it at the top).\n"
            "- undo_edit: revert the last edit this tool made to `path`.\n"
            f"Paths are absolute, or relative to {self.workdir}. Bytes are kept exactly as given: tabs, "
            "CRLF line ends, a missing final newline.",
            {
                "command": {"type": "string", "enum": list(COMMANDS), "description": "The operation."},
                "path": {"type": "string", "description": "File or directory, e.g. /testbed/solve.py."},
                "file_text": {"type": "string", "description": "create: the whole content of the new file."},
                "old_str": {"type": "string", "description": "str_replace: the exact text to replace."},
                "new_str": {"type": "string",
                            "description": "str_replace: the replacement (empty to delete); insert: the text."},
                "insert_line": {"type": "integer", "description": "insert: the line after which to insert."},
                "view_range": {"type": "array", "items": {"type": "integer"},
                               "description": "view: [first, last] line, 1-based; last -1 means end of file."},
            },
            ["command", "path"])

    # ------------------------------------------------------------------ dispatch
    async def run(self, sandbox: Sandbox, args: dict[str, Any]) -> ToolOutput:
        command = require_str(args, "command")
        if command not in COMMANDS:
            raise ToolArgumentError(f"unknown command {command!r}; use one of {', '.join(COMMANDS)}")
        path = require_str(args, "path", allow_empty=False)
        if "\0" in path:
            raise ToolArgumentError("`path` holds a NUL character, which no file name can contain")
        return await getattr(self, "_" + command)(sandbox, self.resolve(path), args)

    def resolve(self, path: str) -> str:
        if not path.startswith("/"):
            path = posixpath.join(self.workdir, path)
        return posixpath.normpath(path)

    @staticmethod
    async def _stat(sandbox: Sandbox, path: str) -> Optional[FileStat]:
        """The path's stat after following symlinks; None when it does not exist."""
        _, st = await sandbox.resolve(path)
        return st

    @staticmethod
    def _must_be_file(path: str, st: Optional[FileStat]) -> FileStat:
        if st is None:
            raise SandboxFileError(f"{path} does not exist")
        if st.is_dir:
            raise SandboxFileError(f"{path} is a directory")
        if not st.is_file:
            raise SandboxFileError(f"{path} is a {st.kind}, not a regular file: the editor reads and writes regular "
                                   "files only (use execute_bash for this one)")
        return st

    async def _read_text(self, sandbox: Sandbox, path: str) -> tuple[bytes, str, Optional[int]]:
        st = self._must_be_file(path, await self._stat(sandbox, path))
        data = await sandbox.read_file(path, max_bytes=MAX_FILE_BYTES)
        if is_binary(data):
            raise SandboxFileError(
                f"{path} is a binary file ({len(data):,} bytes); the editor handles text only. Inspect it with "
                "execute_bash instead (file, xxd, or a Python script).")
        return data, decode(data), st.mode

    async def _save(self, sandbox: Sandbox, path: str, old: Optional[bytes], mode: Optional[int], new: bytes):
        await sandbox.write_file(path, new, mode)
        self.history.setdefault(path, []).append((old, mode))

    # ------------------------------------------------------------------ commands
    async def _view(self, sandbox: Sandbox, path: str, args: dict) -> ToolOutput:
        st = await self._stat(sandbox, path)
        if st is None:
            return ToolOutput(f"Error: {path} does not exist.", error=True)
        if st.is_dir:
            if args.get("view_range") is not None:
                raise ToolArgumentError("`view_range` applies to files, not directories")
            return await self._view_dir(sandbox, path)
        _, text, _ = await self._read_text(sandbox, path)
        lines = split_lines(text)
        first, last = 1, len(lines)
        rng = args.get("view_range")
        if rng is not None:
            first, last = self._range(rng, len(lines))
        shown = lines[first - 1:last]
        body = numbered(shown, first)
        notes = []
        if "\r\n" in text:
            notes.append("CRLF line endings")
        if text and not text.endswith("\n"):
            notes.append("no newline at end of file")
        head = f"{path}: {len(lines)} line{'s' if len(lines) != 1 else ''}"
        head += f" ({', '.join(notes)})" if notes else ""
        if rng is not None:
            head += f"; lines {first}-{last}"
        if len(body) > self.view_limit:
            cut = body[: self.view_limit].rsplit("\n", 1)[0]
            last_shown = first + cut.count("\n")
            return ToolOutput(f"{head}\n{cut}\n[... clipped at line {last_shown} of {len(lines)}: view the rest "
                              "with `view_range`, or search it with `grep -n` in execute_bash ...]",
                              total_chars=len(body))
        return ToolOutput(f"{head}\n{body}" if body else f"{head}\n(empty)", total_chars=len(body))

    @staticmethod
    def _range(rng: Any, n: int) -> tuple[int, int]:
        if isinstance(rng, str):  # "[1, 20]" from models that quote everything
            import json

            try:
                rng = json.loads(rng)
            except ValueError:
                raise ToolArgumentError("`view_range` must be a list of two integers, e.g. [1, 40]") from None
        if not isinstance(rng, (list, tuple)) or len(rng) != 2:
            raise ToolArgumentError("`view_range` must be a list of two integers, e.g. [1, 40]")
        first, last = as_int(rng[0], "view_range[0]"), as_int(rng[1], "view_range[1]")
        if last == -1:
            last = n
        if first < 1 or first > max(n, 1):
            raise ToolArgumentError(f"`view_range` starts at {first}, but the file has {n} lines")
        if last < first:
            raise ToolArgumentError(f"`view_range` [{first}, {last}]: the end is before the start")
        return first, min(last, n)

    async def _view_dir(self, sandbox: Sandbox, path: str) -> ToolOutput:
        res = await sandbox.exec(["find", path, "-maxdepth", "2", "-not", "-path", "*/.*", "-printf", r"%y %p\n"])
        if res.exit_code not in (0, 1) or (res.exit_code == 1 and not res.stdout):
            return ToolOutput(f"Error: cannot list {path}: {res.stderr.strip()}", error=True)
        entries = sorted(line.split(" ", 1) for line in res.stdout.splitlines() if " " in line)
        entries = [(kind, p) for kind, p in entries if p != path]
        shown = [p + ("/" if kind == "d" else "") for kind, p in entries[:MAX_DIR_ENTRIES]]
        text = f"{path}/ (two levels deep, hidden entries left out):\n" + ("\n".join(shown) if shown else "(empty)")
        if len(entries) > MAX_DIR_ENTRIES:
            text += f"\n[... {len(entries) - MAX_DIR_ENTRIES} more entries: use ls or find in execute_bash ...]"
        return ToolOutput(text)

    async def _create(self, sandbox: Sandbox, path: str, args: dict) -> ToolOutput:
        text = require_str(args, "file_text")
        st = await self._stat(sandbox, path)
        old, mode = None, None
        if st is not None:
            self._must_be_file(path, st)
            old, mode = await sandbox.read_file(path, max_bytes=MAX_FILE_BYTES), st.mode
        data = encode(text)
        await self._save(sandbox, path, old, mode, data)
        verb = "Overwrote" if st is not None else "Created"
        return ToolOutput(f"{verb} {path} ({len(data):,} bytes)." +
                          (" undo_edit brings back the previous content." if st is not None else ""))

    async def _str_replace(self, sandbox: Sandbox, path: str, args: dict) -> ToolOutput:
        old_str = require_str(args, "old_str", allow_empty=False)
        new_str = args.get("new_str") or ""
        if not isinstance(new_str, str):
            raise ToolArgumentError("`new_str` must be a string")
        data, text, mode = await self._read_text(sandbox, path)
        count = text.count(old_str)
        if count == 0 and "\r\n" in text and "\n" in old_str and "\r\n" not in old_str:
            # the model wrote \n line ends for a CRLF file: match in the file's own convention
            crlf_old = old_str.replace("\n", "\r\n")
            if text.count(crlf_old) == 1:
                old_str, new_str, count = crlf_old, new_str.replace("\r\n", "\n").replace("\n", "\r\n"), 1
        if count == 0:
            hint = ""
            stripped = old_str.strip()
            if stripped and stripped != old_str and text.count(stripped) >= 1:
                hint = (f" A match ignoring leading/trailing whitespace exists at line "
                        f"{line_of(text, text.index(stripped))}: check indentation and line ends.")
            return ToolOutput(f"Error: `old_str` was not found in {path}; it must match exactly, whitespace "
                              f"included.{hint}", error=True)
        if count > 1:
            lines, start = [], 0
            while len(lines) < 10:
                i = text.find(old_str, start)
                if i < 0:
                    break
                lines.append(str(line_of(text, i)))
                start = i + 1
            return ToolOutput(f"Error: `old_str` occurs {count} times in {path} (at lines {', '.join(lines)}); "
                              "include more surrounding text so that it matches exactly once.", error=True)
        at = text.index(old_str)
        new_text = text[:at] + new_str + text[at + len(old_str):]
        await self._save(sandbox, path, data, mode, encode(new_text))
        first = line_of(new_text, at)
        return ToolOutput(f"Edited {path}. " + self._snippet(new_text, first, first + new_str.count("\n")))

    async def _insert(self, sandbox: Sandbox, path: str, args: dict) -> ToolOutput:
        if args.get("insert_line") is None:
            raise ToolArgumentError("missing required argument `insert_line`")
        at = as_int(args["insert_line"], "insert_line")
        new_str = require_str(args, "new_str")
        data, text, mode = await self._read_text(sandbox, path)
        lines = split_lines(text)
        if at < 0 or at > len(lines):
            raise ToolArgumentError(f"`insert_line` must be between 0 and {len(lines)} (the file's line count)")
        nl = newline_of(text)
        if nl == "\r\n":
            new_str = new_str.replace("\r\n", "\n").replace("\n", "\r\n")
        if not new_str.endswith("\n"):
            new_str += nl
        if at == len(lines) and lines and not lines[-1].endswith("\n"):
            lines[-1] += nl  # the file had no final newline: keep it that way after the insert
            new_str = new_str[: -len(nl)]
        new_text = "".join(lines[:at]) + new_str + "".join(lines[at:])
        await self._save(sandbox, path, data, mode, encode(new_text))
        return ToolOutput(f"Inserted {new_str.count(chr(10)) or 1} line(s) into {path} after line {at}. " +
                          self._snippet(new_text, at + 1, at + max(new_str.count("\n"), 1)))

    async def _undo_edit(self, sandbox: Sandbox, path: str, args: dict) -> ToolOutput:
        stack = self.history.get(path)
        if not stack:
            return ToolOutput(f"Error: no edit of {path} to undo (undo_edit only reverts this tool's own edits).",
                              error=True)
        old, mode = stack.pop()
        if old is None:
            await sandbox.remove_file(path)
            return ToolOutput(f"Undid the creation of {path}: the file is removed.")
        await sandbox.write_file(path, old, mode)
        return ToolOutput(f"Reverted {path} to its content before the last edit ({len(old):,} bytes).")

    def _snippet(self, text: str, first: int, last: int) -> str:
        lines = split_lines(text)
        lo = max(first - SNIPPET_CONTEXT, 1)
        hi = min(last + SNIPPET_CONTEXT, len(lines))
        body = numbered(lines[lo - 1:hi], lo)
        if len(body) > self.view_limit:
            body = body[: self.view_limit] + "\n[... snippet clipped ...]"
        return f"Lines {lo}-{hi} now read:\n{body}"
