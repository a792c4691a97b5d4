"""A run's files: paths stay inside the run folder, kinds, text and tables read within their limits."""
from __future__ import annotations

import os

import pytest

from insandbox.viewer import files as F


def test_paths_resolve_only_inside_the_run_folder_and_never_through_a_link(tmp_path):
    run = tmp_path / "run"
    (run / "files" / "sub").mkdir(parents=True)
    (run / "files" / "sub" / "a.txt").write_text("a")
    (tmp_path / "secret.txt").write_text("no")
    os.symlink(tmp_path / "secret.txt", run / "files" / "out")
    os.symlink(run / "files" / "sub", run / "files" / "inner")  # even a link that stays inside is not followed
    assert F.resolve_inside(run, "files/sub/a.txt") == (run / "files" / "sub" / "a.txt").resolve()
    assert F.resolve_inside(run, "./files/sub") == (run / "files" / "sub").resolve()
    for bad in ("../secret.txt", "files/../../secret.txt", "/etc/passwd", "files/out", "files/inner/a.txt",
                "files/missing", "", ".", "files/\x00"):
        with pytest.raises(F.NotInside):
            F.resolve_inside(run, bad)


def test_kinds_text_and_tables(tmp_path):
    assert [F.kind_of(n) for n in ("a.PNG", "s.wav", "m.mid", "v.webm", "p.html", "t.tsv", "x.py", "z.npz")] == \
        ["image", "audio", "midi", "video", "html", "table", "text", "binary"]
    assert F.language_of("x.py") == "python" and F.language_of("Dockerfile") == "dockerfile"
    big = tmp_path / "big.txt"
    big.write_text("é" * 600_000)  # 1.2 MB of two-byte characters: the clip falls inside one
    text, clipped = F.read_text(big)
    assert clipped and len(text.encode()) <= F.TEXT_LIMIT and text.startswith("éé")
    (tmp_path / "bin.txt").write_bytes(b"abc\x00def")
    assert F.read_text(tmp_path / "bin.txt") == (None, False)
    table = tmp_path / "t.tsv"
    table.write_text("a\tb\n" + "".join(f"{i}\t{i * i}\n" for i in range(1000)))
    rows, more = F.read_table(table)
    assert rows[0] == ["a", "b"] and rows[1] == ["0", "0"] and len(rows) == F.TABLE_ROWS and more


def test_listings_are_sorted_folders_first_and_skip_links(tmp_path):
    (tmp_path / "b.txt").write_text("b")
    (tmp_path / "A.txt").write_text("a")
    (tmp_path / "zdir").mkdir()
    os.symlink("/etc", tmp_path / "link")
    listings = F.Listings()
    entries, total = listings.page(tmp_path)
    assert [e.name for e in entries] == ["zdir", "A.txt", "b.txt"] and total == 3
    (tmp_path / "c.txt").write_text("c")  # the folder changed: listed again
    assert listings.page(tmp_path, filter_text="C")[1] == 1


def test_every_byte_of_a_name_goes_through_a_url_and_back(tmp_path):
    """url_path encodes each name whole and names_of_url decodes it once: any byte but "/" and NUL survives,
    and nothing in the URL is left for a browser to read as a separator, `..`, a query or a fragment."""
    names = [bytes([b]) * n for b in range(1, 256) if b != ord("/") for n in (1, 2)]
    names = [n for n in names if n not in (b".", b"..")]  # the two names no file can have
    names += [b".%2e", b"%2e%2e", b"..%2f", b"a?b#c", b"new\nline", b"back\\slash", b"caf\xe9", b"x" * 255]
    for name in names:
        rel = "files/" + os.fsdecode(name)
        url = F.url_path(rel)
        assert all(c.isascii() and (c.isalnum() or c in "%-._~/") for c in url), (name, url)
        assert not any(seg in (".", "..") or seg.lower().startswith("%2e") for seg in url.split("/")), (name, url)
        assert F.names_of_url(b"/r/x/raw/" + url.encode())[3:] == ["files", os.fsdecode(name)]
        assert F.query_value(f"q=1&dir={F.url_query(rel)}&dir=no".encode(), "dir") == rel
    for bad in (b"/r/x/raw/a%2Fb", b"/r/x/raw/a%00"):  # a name cannot hold these
        with pytest.raises(F.BadPath):
            F.names_of_url(bad)


def test_a_backslash_is_part_of_a_name(tmp_path):
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "a\\b").write_text("one file")
    (tmp_path / "files" / "..\\x").write_text("not a way out")
    assert F.resolve_inside(tmp_path, "files/a\\b") == (tmp_path / "files" / "a\\b").resolve()
    assert F.resolve_inside(tmp_path, "files/..\\x").read_text() == "not a way out"
    with pytest.raises(F.NotInside):
        F.resolve_inside(tmp_path, "files/a")  # not files/a/b
