"""A run's files for the viewer: paths resolved strictly inside the run folder, paged listings, and how
each kind of file is shown (image, audio, video, HTML page, table, text, or a download)."""
from __future__ import annotations

import csv
import io
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Optional
from urllib.parse import parse_qsl, quote_from_bytes, unquote_to_bytes

from ..core.errors import InternalSignal

PAGE = 200  # entries of a listing per page
TEXT_LIMIT = 1024 * 1024  # bytes of a text file shown
TABLE_ROWS = 500

IMAGE = {"png", "jpg", "jpeg", "gif", "svg", "webp", "bmp", "ico"}
AUDIO = {"wav", "mp3", "ogg", "oga", "flac", "m4a", "opus"}
MIDI = {"mid", "midi"}
VIDEO = {"mp4", "webm", "ogv", "mov", "m4v"}
HTML = {"html", "htm"}
TABLE = {"csv": ",", "tsv": "\t"}
# file extension -> highlight.js language (the ones highlight.min.js has, plus the vendored extras)
LANGUAGES = {
    "py": "python", "sh": "bash", "bash": "bash", "zsh": "bash", "c": "c", "h": "c", "cc": "cpp", "cpp": "cpp",
    "hpp": "cpp", "cs": "csharp", "css": "css", "diff": "diff", "patch": "diff", "go": "go", "java": "java",
    "js": "javascript", "mjs": "javascript", "ts": "typescript", "json": "json", "jsonl": "json", "kt": "kotlin",
    "lua": "lua", "md": "markdown", "markdown": "markdown", "pl": "perl", "php": "php", "r": "r", "rb": "ruby",
    "rs": "rust", "sql": "sql", "swift": "swift", "xml": "xml", "yaml": "yaml", "yml": "yaml", "toml": "ini",
    "ini": "ini", "cfg": "ini", "tex": "latex", "bib": "latex", "jl": "julia", "dockerfile": "dockerfile",
    "mk": "makefile", "txt": "plaintext", "log": "plaintext", "out": "plaintext",
}


class NotInside(InternalSignal):
    """The path leaves the run folder, goes through a symbolic link, or is not there: answered with 404."""


def resolve_inside(run_dir: Path, rel: str) -> Path:
    """`rel` (a path relative to the run folder, as in a URL) as a path that is inside the run folder,
    reached without following any symbolic link. A backslash is part of a name, as on Linux."""
    parts = PurePosixPath(rel).parts
    if not parts or any(p in ("..", "") or p.startswith("/") for p in parts) or "\x00" in rel:
        raise NotInside(rel)
    base = Path(run_dir).resolve()
    path = base
    for p in parts:
        if p == ".":
            continue
        path = path / p
        try:
            st = os.lstat(path)
        except OSError:
            raise NotInside(rel) from None
        if stat.S_ISLNK(st.st_mode):
            raise NotInside(rel)
    if path == base or not path.resolve().is_relative_to(base):
        raise NotInside(rel)
    return path


# A name a model made may hold any byte but "/" and NUL, undecodable ones included: names are kept as
# os.fsdecode makes them (surrogate escapes), put in URLs byte by byte and shown with U+FFFD for such bytes.
def _bytes(text: str) -> bytes:
    try:
        return os.fsencode(text)
    except UnicodeEncodeError:  # a lone surrogate from JSON, not from the file system
        return text.encode("utf-8", errors="replace")


def url_path(rel: str) -> str:
    """A relative path as a URL path: each name percent-encoded whole, so that no name can act as `..`, a
    query, a fragment or a separator in the browser (`.%2e` becomes `.%252e`)."""
    return "/".join(quote_from_bytes(_bytes(part), safe="") for part in rel.split("/"))


def url_query(value: str) -> str:
    """A value for a URL's query, every byte but letters, digits and `-._~` percent-encoded."""
    return quote_from_bytes(_bytes(str(value)), safe="")


def shown(name: str) -> str:
    """A name as text a page can carry: bytes that are not UTF-8 become U+FFFD."""
    return _bytes(name).decode("utf-8", errors="replace")


class BadPath(InternalSignal, ValueError):
    """A URL path whose names cannot be names: one decodes to hold a "/" or a NUL."""


def names_of_url(raw_path: bytes) -> list[str]:
    """The names of a URL path as sent (percent-encoded), each decoded exactly once, byte for byte."""
    names = [os.fsdecode(unquote_to_bytes(seg)) for seg in raw_path.split(b"/")[1:]]
    if any("/" in n or "\x00" in n for n in names):
        raise BadPath(raw_path)
    return names


def query_value(query_string: bytes, key: str) -> Optional[str]:
    """The first value of `key` in a raw query string, decoded once, byte for byte (Starlette's own query
    parameters replace bytes that are not UTF-8)."""
    pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True, encoding="latin-1")
    for k, v in pairs:
        if k == key:
            return os.fsdecode(v.encode("latin-1"))
    return None


@dataclass
class Entry:
    name: str
    is_dir: bool
    size: int


class Listings:
    """Folder listings (sorted, folders first), kept until the folder's mtime changes, and paged."""

    def __init__(self, keep: int = 16):
        self.keep = keep
        self._items: dict[str, tuple[int, list[Entry]]] = {}
        self._lock = threading.Lock()

    def entries(self, folder: Path) -> list[Entry]:
        st = os.stat(folder)
        with self._lock:
            hit = self._items.get(str(folder))
        if hit and hit[0] == st.st_mtime_ns:
            return hit[1]
        out = []
        with os.scandir(folder) as it:
            for e in it:
                try:
                    est = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISLNK(est.st_mode):
                    continue  # never followed, so never listed
                out.append(Entry(e.name, stat.S_ISDIR(est.st_mode), est.st_size))
        out.sort(key=lambda x: (not x.is_dir, x.name.lower(), x.name))
        with self._lock:
            self._items[str(folder)] = (st.st_mtime_ns, out)
            while len(self._items) > self.keep:
                self._items.pop(next(iter(self._items)))
        return out

    def page(self, folder: Path, page: int = 0, filter_text: str = "", per_page: int = PAGE) -> tuple[list[Entry], int]:
        """One page of the folder's entries whose names contain `filter_text` (any case), and how many match."""
        entries = self.entries(folder)
        if filter_text:
            needle = filter_text.lower()
            entries = [e for e in entries if needle in e.name.lower()]
        start = max(page, 0) * per_page
        return entries[start:start + per_page], len(entries)


def extension(name: str) -> str:
    lower = name.lower()
    if lower == "dockerfile" or lower.endswith(".dockerfile"):
        return "dockerfile"
    return lower.rsplit(".", 1)[-1] if "." in lower else ""


def kind_of(name: str) -> str:
    """How a file is shown: image, audio, midi, video, html, table, text or binary (decided by the name;
    `text` is checked against the content when shown)."""
    ext = extension(name)
    for kind, exts in (("image", IMAGE), ("audio", AUDIO), ("midi", MIDI), ("video", VIDEO), ("html", HTML),
                       ("table", TABLE)):
        if ext in exts:
            return kind
    if ext in ("pdf", "zip", "gz", "tar", "npy", "npz", "pkl", "pt", "bin", "so", "o", "exe", "whl", "sqlite", "db"):
        return "binary"
    return "text"


def language_of(name: str) -> str:
    return LANGUAGES.get(extension(name), "")


def read_text(path: Path, limit: int = TEXT_LIMIT) -> tuple[Optional[str], bool]:
    """The file's text (None if it looks binary: a NUL byte, or not UTF-8 at all) and whether it was clipped."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    clipped = len(data) > limit
    data = data[:limit]
    if b"\x00" in data[:8192]:
        return None, clipped
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        if clipped and e.start >= len(data) - 4:  # a character cut in two by the clip
            text = data[:e.start].decode("utf-8", errors="replace")
        else:
            return None, clipped
    return text, clipped


def read_table(path: Path, rows: int = TABLE_ROWS) -> tuple[list[list[str]], bool]:
    """The first `rows` rows of a CSV/TSV file (the header among them) and whether there are more."""
    text, _ = read_text(path, limit=8 * 1024 * 1024)
    if text is None:
        return [], False
    reader = csv.reader(io.StringIO(text), delimiter=TABLE.get(extension(path.name), ","))
    out = []
    try:
        for row in reader:
            if len(out) == rows:
                return out, True
            out.append(row)
    except csv.Error:
        pass
    return out, False
