"""str_replace_editor on a real sandbox: any text file, exact bytes, clear errors."""
from __future__ import annotations

import json

from insandbox.tools import StrReplaceEditor, ToolBox, ToolCall


def _editor_session(sandbox_factory, run_async, body, **editor_kw):
    """Drive the editor through the ToolBox, as the loop does (argument errors become output)."""
    async def wrapped():
        sb = await sandbox_factory()
        box = ToolBox([StrReplaceEditor(**editor_kw)])

        async def call(**args):
            out, _ = await box.call(sb, ToolCall("c1", "str_replace_editor", json.dumps(args)))
            return out
        try:
            await body(sb, call)
        finally:
            await sb.close()
    run_async(wrapped())


def test_create_keeps_bytes_exactly(sandbox_factory, run_async):
    cases = {"empty.txt": "", "dash_e.txt": "-e", "tabs.py": "a\tb\n\t\tc\n", "crlf.csv": "a,b\r\n1,2\r\n",
             "nonl.md": "# title\nno final newline", "utf8.txt": "héllo ✓ 日本語 😀\n",
             "big.txt": "x" * 299_999 + "\n"}

    async def body(sb, call):
        for name, text in cases.items():
            out = await call(command="create", path=f"/testbed/f/{name}", file_text=text)
            assert not out.error and f"({len(text.encode()):,} bytes)" in out.text
            assert await sb.read_file(f"/testbed/f/{name}") == text.encode()
    _editor_session(sandbox_factory, run_async, body)


def test_view_any_text_file_with_line_numbers(sandbox_factory, run_async):
    async def body(sb, call):
        await sb.write_file("/testbed/data.csv", b"a,b\r\n1,2\r\n")
        await sb.write_file("/testbed/notes.md", b"line one\n\tindented\nlast")
        out = await call(command="view", path="/testbed/data.csv")
        assert "CRLF line endings" in out.text
        assert "     1\ta,b\n     2\t1,2" in out.text and "\r" not in out.text
        out = await call(command="view", path="notes.md")  # relative to /testbed
        assert "no newline at end of file" in out.text
        assert "     2\t\tindented" in out.text  # tabs shown as they are
        out = await call(command="view", path="/testbed/notes.md", view_range=[2, -1])
        assert "     2\t\tindented\n     3\tlast" in out.text and "line one" not in out.text
        out = await call(command="view", path="/testbed/notes.md", view_range="[1, 1]")  # quoted by a small model
        assert "     1\tline one" in out.text and "indented" not in out.text
        out = await call(command="view", path="/testbed/notes.md", view_range=[5, 9])
        assert out.error and "has 3 lines" in out.text
    _editor_session(sandbox_factory, run_async, body)


def test_view_directory_two_levels_without_hidden(sandbox_factory, run_async):
    async def body(sb, call):
        await sb.run("mkdir -p /testbed/d/a/b/c && touch /testbed/d/top.txt /testbed/d/a/mid.txt "
                     "/testbed/d/a/b/deep.txt /testbed/d/.hidden")
        out = await call(command="view", path="/testbed/d")
        assert "/testbed/d/a/\n" in out.text and "/testbed/d/top.txt" in out.text
        assert "/testbed/d/a/mid.txt" in out.text and "/testbed/d/a/b/" in out.text
        assert "deep.txt" not in out.text and ".hidden" not in out.text
    _editor_session(sandbox_factory, run_async, body)


def test_long_view_is_clipped_with_a_hint(sandbox_factory, run_async):
    async def body(sb, call):
        await sb.write_file("/testbed/long.txt", "".join(f"row {i}\n" for i in range(1, 5001)).encode())
        out = await call(command="view", path="/testbed/long.txt")
        assert len(out.text) < 2200 and "view_range" in out.text and "grep" in out.text
        assert "of 5000" in out.text
    _editor_session(sandbox_factory, run_async, body, view_limit_chars=2000)


def test_binary_and_missing_files_are_refused_clearly(sandbox_factory, run_async):
    async def body(sb, call):
        await sb.write_file("/testbed/img.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
        out = await call(command="view", path="/testbed/img.png")
        assert out.error and "binary" in out.text
        out = await call(command="str_replace", path="/testbed/img.png", old_str="PNG", new_str="x")
        assert out.error and "binary" in out.text
        out = await call(command="view", path="/testbed/nope.txt")
        assert out.error and "does not exist" in out.text
        out = await call(command="create", path="/testbed", file_text="x")
        assert out.error and "directory" in out.text
    _editor_session(sandbox_factory, run_async, body)


def test_str_replace_needs_exactly_one_match(sandbox_factory, run_async):
    async def body(sb, call):
        await sb.write_file("/testbed/t.py", b"def f():\n\treturn 1\n\ndef g():\n\treturn 1\n")
        out = await call(command="str_replace", path="/testbed/t.py", old_str="\treturn 1", new_str="\treturn 2")
        assert out.error and "2 times" in out.text and "lines 2, 5" in out.text
        out = await call(command="str_replace", path="/testbed/t.py", old_str="return 3", new_str="x")
        assert out.error and "not found" in out.text
        out = await call(command="str_replace", path="/testbed/t.py", old_str="  return 1\n\ndef g",
                         new_str="x")
        assert out.error and "whitespace" in out.text
        out = await call(command="str_replace", path="/testbed/t.py", old_str="def g():\n\treturn 1",
                         new_str="def g():\n\treturn 2")
        assert not out.error and "     5\t\treturn 2" in out.text
        assert await sb.read_file("/testbed/t.py") == b"def f():\n\treturn 1\n\ndef g():\n\treturn 2\n"
        out = await call(command="str_replace", path="/testbed/t.py", old_str="\n\ndef g():\n\treturn 2")
        assert not out.error  # new_str omitted: delete
        assert await sb.read_file("/testbed/t.py") == b"def f():\n\treturn 1\n"
    _editor_session(sandbox_factory, run_async, body)


def test_crlf_and_non_utf8_files_keep_their_bytes(sandbox_factory, run_async):
    async def body(sb, call):
        await sb.write_file("/testbed/w.csv", b"a,b\r\n1,2\r\n3,4\r\n")
        out = await call(command="str_replace", path="/testbed/w.csv", old_str="1,2\n3,4", new_str="1,2\n9,9")
        assert not out.error  # the model wrote \n; the file's CRLF is matched and kept
        assert await sb.read_file("/testbed/w.csv") == b"a,b\r\n1,2\r\n9,9\r\n"
        await sb.write_file("/testbed/l1.txt", "café\nnaïve\n".encode("latin-1"))
        out = await call(command="str_replace", path="/testbed/l1.txt", old_str="na", new_str="NA")
        assert not out.error
        assert await sb.read_file("/testbed/l1.txt") == "café\nNAïve\n".encode("latin-1")
    _editor_session(sandbox_factory, run_async, body)


def test_insert_keeps_line_ends(sandbox_factory, run_async):
    async def body(sb, call):
        await sb.write_file("/testbed/i.txt", b"one\ntwo")
        assert not (await call(command="insert", path="/testbed/i.txt", insert_line=0, new_str="zero")).error
        assert not (await call(command="insert", path="/testbed/i.txt", insert_line="2", new_str="1.5\n")).error
        assert not (await call(command="insert", path="/testbed/i.txt", insert_line=4, new_str="three")).error
        assert await sb.read_file("/testbed/i.txt") == b"zero\none\n1.5\ntwo\nthree"
        await sb.write_file("/testbed/c.txt", b"a\r\nb\r\n")
        assert not (await call(command="insert", path="/testbed/c.txt", insert_line=1, new_str="x\ny")).error
        assert await sb.read_file("/testbed/c.txt") == b"a\r\nx\r\ny\r\nb\r\n"
        out = await call(command="insert", path="/testbed/c.txt", insert_line=99, new_str="z")
        assert out.error and "between 0 and 4" in out.text
        out = await call(command="insert", path="/testbed/c.txt", new_str="z")
        assert out.error and "insert_line" in out.text
    _editor_session(sandbox_factory, run_async, body)


def test_undo_edit_restores_previous_versions(sandbox_factory, run_async):
    async def body(sb, call):
        await call(command="create", path="/testbed/u.txt", file_text="v1\n")
        await call(command="str_replace", path="/testbed/u.txt", old_str="v1", new_str="v2")
        await call(command="create", path="/testbed/u.txt", file_text="v3\n")
        assert await sb.read_file("/testbed/u.txt") == b"v3\n"
        assert not (await call(command="undo_edit", path="/testbed/u.txt")).error
        assert await sb.read_file("/testbed/u.txt") == b"v2\n"
        assert not (await call(command="undo_edit", path="/testbed/u.txt")).error
        assert await sb.read_file("/testbed/u.txt") == b"v1\n"
        out = await call(command="undo_edit", path="/testbed/u.txt")  # undoes the creation
        assert "removed" in out.text and await sb.stat("/testbed/u.txt") is None
        out = await call(command="undo_edit", path="/testbed/u.txt")
        assert out.error and "no edit" in out.text
        await sb.run("printf 'x' > /testbed/exe.sh && chmod 755 /testbed/exe.sh")
        await call(command="str_replace", path="/testbed/exe.sh", old_str="x", new_str="y")
        assert (await sb.stat("/testbed/exe.sh")).mode == 0o755  # edits keep the file mode
    _editor_session(sandbox_factory, run_async, body)


def test_paths_that_are_not_regular_files_are_refused_at_once(sandbox_factory, run_async):
    """Regression: `view` of a FIFO blocked the in-container server for 30 s and the run died as
    sandbox_error. Reads and writes never block now: a FIFO, a device, an unreadable file or a path
    no file can have is an error the model reads, and the sandbox answers the next call at once."""
    async def body(sb, call):
        r = await sb.run("mkfifo /testbed/pipe && ln -s /testbed/pipe /testbed/to-pipe && ln -s nowhere /testbed/gone "
                         "&& mkdir -p /testbed/d && echo ok > /testbed/ok.txt")
        assert r.exit_code == 0, r.output
        for args, expect in [
            ({"command": "view", "path": "/testbed/pipe"}, "/testbed/pipe is a FIFO, not a regular file"),
            ({"command": "view", "path": "/testbed/to-pipe"}, "is a FIFO, not a regular file"),
            ({"command": "create", "path": "/testbed/pipe", "file_text": "x"}, "is a FIFO, not a regular file"),
            ({"command": "str_replace", "path": "/testbed/pipe", "old_str": "a", "new_str": "b"}, "FIFO"),
            ({"command": "insert", "path": "/testbed/pipe", "insert_line": 0, "new_str": "x"}, "FIFO"),
            ({"command": "view", "path": "/dev/zero"}, "/dev/zero is a character device"),
            ({"command": "view", "path": "/proc/1/mem"}, "Input/output error"),  # regular, but unreadable
            ({"command": "view", "path": "/testbed/gone"}, "does not exist"),
            ({"command": "create", "path": "/testbed/d", "file_text": "x"}, "is a directory"),
            ({"command": "view", "path": "/testbed/a\u0000b"}, "NUL character"),
        ]:
            out = await call(**args)
            assert out.error and expect in out.text, (args, out.text)
        assert "ok" in (await call(command="view", path="/testbed/ok.txt")).text  # and the sandbox is fine
        r = await sb.run("echo $(( 6 * 7 ))", timeout=5)
        assert r.output == "42\n"
        with_link = await call(command="create", path="/testbed/link.txt", file_text="via link\n")
        assert not with_link.error
    _editor_session(sandbox_factory, run_async, body)


def test_writes_through_a_symlink_reach_its_target(sandbox_factory, run_async):
    """Whatever the size (server or archive path), a write to a symlink writes the file it points
    at, as open() does, instead of replacing the link."""
    async def body(sb, call):
        await sb.run("echo old > /testbed/real.txt && ln -s real.txt /testbed/alias.txt")
        for text in ("small\n", "x" * (2 << 20)):
            out = await call(command="create", path="/testbed/alias.txt", file_text=text)
            assert not out.error, out.text
            r = await sb.run("test -L /testbed/alias.txt && wc -c < /testbed/real.txt")
            assert r.exit_code == 0 and int(r.output) == len(text)
    _editor_session(sandbox_factory, run_async, body)
