"""The viewer against a hostile web page and hostile run folders, over real HTTP (and in Chromium): a Host
header that is not the viewer's (DNS rebinding) is refused on every route; files and folders whose names a
model chose to break URLs are listed, shown and downloaded byte for byte, and none of their links reaches
another file; every answer, error pages included, carries the security headers."""
from __future__ import annotations

import http.client
import os
import re
import socket
import threading
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote_to_bytes

import pytest
import uvicorn
from playwright.sync_api import expect
from starlette.applications import Starlette
from starlette.routing import Route

from insandbox.viewer.files import shown
from insandbox.viewer.guard import PAGE_CSP, RAW_CSP, Guard
from insandbox.viewer.index import folder_id
from tests.viewer.conftest import serve
from tests.viewer.synthetic import write_run

A, B = folder_id("a"), folder_id("b")
SECRET = b"run b's secret\n"
DECOY = b"run a's own file\n"
# .%2e is `..` to a browser: four of them climb from /r/A/raw/files/ to /, then r/B/raw/files/secret.txt
CLIMB = [b".%2e"] * 4 + [b"r", B.encode(), b"raw", b"files"]
NAMES = [b"a?b.txt", b"c#d.txt", b"100%.txt", b"%41.txt", b"%2e%2e", b"..%2f..%2fsecret.txt", b"...", b".. ",
         b".\\..", b"sp ace.txt", b"new\nline.txt", b"tab\there.txt", b"back\\slash.txt", b"quo\"te'.txt",
         b"<i>&amp;.txt", b"caf\xe9.txt", "é ü.txt".encode(), b"a+b=c&d;e.txt", b"x" * 251 + b".txt", b"-",
         b" lead"]
PAGE_NAME = "p?a#g e%2e.html"
PAGE = "<h1 id='t'>framed</h1><p id='s'></p><script>document.getElementById('s').textContent = 'ran';</script>"
FOLDERS = [b"q?dir", b"h#dir", b"back\\dir", b"nl\ndir", b"\xff\xfedir", b"%2E%2E", b"..%5C"]


def content(rel: bytes) -> bytes:
    return b"content of " + repr(rel).encode() + b"\n"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> tuple[Path, dict[bytes, bytes]]:
    """Two runs: b holds a secret; a's files/ holds every hostile name, as files and as folders, and a `.%2e`
    chain that a browser would read as the path of b's secret. Returns the root and a's files by path."""
    root = tmp_path_factory.mktemp("hostile")
    write_run(root / "a")
    write_run(root / "b")
    (root / "b" / "files").mkdir()
    (root / "b" / "files" / "secret.txt").write_bytes(SECRET)
    (root / "b" / "files" / PAGE_NAME).write_text(PAGE)
    files = os.fsencode(root / "a" / "files")
    expected: dict[bytes, bytes] = {}

    def put(rel: bytes, data: bytes) -> None:
        path = os.path.join(files, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        expected[rel] = data

    for name in NAMES:
        put(name, content(name))
    for folder in FOLDERS:
        for name in (b"inner.txt", NAMES[0]):
            put(folder + b"/" + name, content(folder + b"/" + name))
    put(b"/".join(CLIMB + [b"secret.txt"]), DECOY)
    return root, expected


@pytest.fixture(scope="module")
def viewer(hostile):
    served = serve(hostile[0])
    yield served
    served.stop()


def request(port: int, path: str, host, method: str = "GET", address: str = "127.0.0.1"):
    """(status, headers, body) of one request with exactly the Host header(s) given (None: none)."""
    conn = http.client.HTTPConnection(address, port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for h in ([] if host is None else [host] if isinstance(host, str) else host):
            conn.putheader("Host", h)
        conn.endheaders()
        r = conn.getresponse()
        return r.status, r.headers, r.read()
    finally:
        conn.close()


def raw_request(port: int, lines: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(lines.encode())
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


class Links(HTMLParser):
    """The links of a page: (tag attributes, text) of each <a>, and every URL an attribute carries."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.anchors: list[tuple[dict, str]] = []
        self.urls: list[str] = []
        self._open: list[tuple[dict, list[str]]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        urls = [v for k, v in attrs.items() if k in ("href", "src", "hx-get", "data-live")]
        self.urls += [v for v in urls if v not in (None, "#")]  # "#": the href of a link htmx follows
        if tag == "a":
            self._open.append((attrs, []))

    def handle_data(self, data):
        for _, text in self._open:
            text.append(data)

    def handle_endtag(self, tag):
        if tag == "a" and self._open:
            attrs, text = self._open.pop()
            self.anchors.append((attrs, "".join(text)))


DOT_SEGMENTS = {".", "..", "%2e", ".%2e", "%2e.", "%2e%2e"}


def assert_safe(url: str) -> None:
    """What a browser does to a URL cannot change it: printable ASCII, no fragment, no backslash, one query
    at most, and no name a browser reads as `.` or `..`."""
    assert re.fullmatch(r"[!-~]*", url) and "#" not in url and "\\" not in url and url.count("?") <= 1, url
    path = url.split("?")[0]
    assert not any(seg.lower() in DOT_SEGMENTS for seg in path.split("/")), url


def names_in(url: str, prefix: str) -> bytes:
    """The relative path a URL's path names after `prefix`, as bytes (each name decoded once)."""
    path = url.split("?")[0]
    assert path.startswith(prefix), url
    return b"/".join(unquote_to_bytes(seg) for seg in path[len(prefix):].split("/"))


def folder_of(listing_url: str) -> bytes:
    """The folder (relative to files/) a listing URL names in its `dir=`."""
    value = unquote_to_bytes(listing_url.split("dir=", 1)[1].split("&")[0])
    assert value == b"files" or value.startswith(b"files/"), listing_url
    return value[len(b"files/"):]


# ------------------------------------------------------------------------------------- Host header
ROUTES = ["/", "/rows", "/events", "/benches", "/favicon.ico", "/static/viewer.js", "/static/viewer.css",
          "/static/vendor/htmx/htmx.min.js", f"/r/{A}", f"/r/{A}/head", f"/r/{A}/steps?start=0",
          f"/r/{A}/files?dir=files", f"/r/{A}/view/files/%2541.txt", f"/r/{A}/raw/files/%2541.txt",
          f"/r/{A}/raw/files/%2541.txt?download=1", f"/r/{A}/events", f"/r/{B}/events", f"/r/{B}/raw/files/secret.txt",
          "/b/0123456789ab", "/b/0123456789ab/summary", "/b/0123456789ab/items", "/b/0123456789ab/events",
          "/b/0123456789ab/compare?item=x", "/b/0123456789ab/report/report.html", "/no/such/page"]


def test_a_foreign_host_header_is_refused_on_every_route(viewer):
    port = viewer.port
    foreign = ["evil.example", f"evil.example:{port}", "203.0.113.9", f"203.0.113.9:{port}", f"[2001:db8::1]:{port}",
               f"localhost.evil.example:{port}", "127.0.0.1.nip.io", f"localhost:{port}@evil.example", "",
               "localhost:notaport", "127.0.0.2", f"[::ffff:203.0.113.9]:{port}"]
    for path in ROUTES:
        for host in foreign:
            status, headers, body = request(port, path, host)
            assert status == 400, (path, host, status)
            assert headers["Content-Security-Policy"] == PAGE_CSP and headers["X-Content-Type-Options"] == "nosniff"
            assert b"refused" in body and b"secret" not in body and b"content of" not in body, (path, host)
        # two Host headers: h11 refuses them before the app sees them (a parser that passes them on meets the guard)
        status, _, body = request(port, path, ["localhost", "evil.example"])
        assert status == 400 and b"secret" not in body and b"content of" not in body
    # HTTP/1.0 may leave the Host out: refused as well
    answer = raw_request(port, f"GET /r/{B}/raw/files/secret.txt HTTP/1.0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400") and SECRET not in answer


def test_the_loopback_names_and_the_given_host_are_answered(hostile, viewer):
    port = viewer.port
    for host in (f"127.0.0.1:{port}", "127.0.0.1", f"localhost:{port}", "LocalHost", f"[::1]:{port}", "[::1]",
                 f"[0:0:0:0:0:0:0:1]:{port}", f"localhost:{port + 1}"):  # a forwarded port is still this viewer
        for path in ("/", f"/r/{A}", "/static/viewer.js", f"/r/{B}/events"):
            assert request(port, path, host)[0] == 200, (host, path)
        assert request(port, f"/r/{B}/raw/files/secret.txt", host)[2] == SECRET
    named = serve(hostile[0], host="viewer.lan")  # `--host viewer.lan`, that name resolving to this machine
    try:
        assert request(named.port, f"/r/{B}/raw/files/secret.txt", f"viewer.lan:{named.port}")[2] == SECRET
        assert request(named.port, "/", "VIEWER.LAN")[0] == 200 and request(named.port, "/", "localhost")[0] == 200
        assert request(named.port, "/", "evil.example")[0] == 400
        assert request(named.port, "/", "viewer.lan.evil.example")[0] == 400
    finally:
        named.stop()


def test_on_every_interface_the_machines_own_names_and_addresses_are_answered(hostile):
    everywhere = serve(hostile[0], listen="0.0.0.0", host="0.0.0.0")
    port = everywhere.port
    try:
        secret = f"/r/{B}/raw/files/secret.txt"
        for host in (socket.gethostname(), f"{socket.gethostname()}:{port}", f"0.0.0.0:{port}", f"localhost:{port}"):
            assert request(port, secret, host)[2] == SECRET, host
        # reached on 127.0.0.2 (one of this machine's addresses): that address is answered, others are not
        assert request(port, secret, f"127.0.0.2:{port}", address="127.0.0.2")[2] == SECRET
        for host in ("127.0.0.3", "203.0.113.9", "evil.example", f"evil.example:{port}"):
            assert request(port, secret, host, address="127.0.0.2")[0] == 400, host
    finally:
        everywhere.stop()


# ------------------------------------------------------------------------------------- headers
def test_every_answer_error_pages_included_carries_the_security_headers(tmp_path, hostile, viewer):
    port = viewer.port
    host = f"127.0.0.1:{port}"
    cases = {f"/r/{A}": 200, "/static/viewer.js": 200, f"/r/{B}/events": 200, "/favicon.ico": 204,
             "/no/such/page": 404, "/r/nope": 404, f"/r/{A}/view/files/missing.txt": 404,
             f"/r/{A}/raw/files/..%2F..%2Fb%2Ffiles%2Fsecret.txt": 404, f"/r/{A}/files?dir=..": 404}
    for path, code in cases.items():
        status, headers, body = request(port, path, host)
        assert status == code, (path, status)
        assert headers["Content-Security-Policy"] == PAGE_CSP, path
        assert headers["X-Content-Type-Options"] == "nosniff" and headers["Referrer-Policy"] == "no-referrer"
        assert headers["X-Frame-Options"] == "SAMEORIGIN"
    status, headers, _ = request(port, "/", host, method="POST")
    assert status == 405 and headers["Content-Security-Policy"] == PAGE_CSP
    status, headers, _ = request(port, f"/r/{B}/raw/files/secret.txt", host)  # a produced file keeps its sandbox
    assert status == 200 and headers["Content-Security-Policy"] == RAW_CSP and "frame-ancestors 'self'" in RAW_CSP

    (tmp_path / "broken").mkdir()  # 422: a trajectory that cannot be read
    (tmp_path / "broken" / "trajectory.json").write_text('{"run_id": "cut sh')
    (tmp_path / "fine").mkdir()
    write_run(tmp_path / "fine")
    served = serve(tmp_path)
    try:
        status, headers, body = request(served.port, f"/r/{folder_id('broken')}", f"localhost:{served.port}")
        assert status == 422 and headers["Content-Security-Policy"] == PAGE_CSP and b"cannot be read" in body
    finally:
        served.stop()


def test_a_500_from_the_app_still_carries_the_headers():
    """The guard wraps the app outside Starlette's error middleware: a handler that fails still answers with
    the headers (the viewer's own handlers have no such failure to trigger)."""
    def fails(request):
        raise RuntimeError("a bug")

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    srv = uvicorn.Server(uvicorn.Config(Guard(Starlette(routes=[Route("/", fails)])), log_level="critical",
                                        lifespan="off"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 10
    while not srv.started and time.time() < deadline:
        time.sleep(0.02)
    try:
        port = sock.getsockname()[1]
        status, headers, _ = request(port, "/", f"localhost:{port}")
        assert status == 500 and headers["Content-Security-Policy"] == PAGE_CSP
        assert headers["X-Content-Type-Options"] == "nosniff"
    finally:
        srv.should_exit = True
        thread.join(10)


# ------------------------------------------------------------------------------------- hostile names
def test_every_hostile_name_is_listed_shown_and_downloaded_byte_for_byte(hostile, viewer):
    """Walks a's files through the links the viewer itself makes (listings, folder links, breadcrumbs, file
    views, their raw and download links): every file is reached, each link gives that file's bytes."""
    _, expected = hostile
    port, host = viewer.port, f"localhost:{viewer.port}"
    prefix = f"/r/{A}/raw/files/"

    def get(url: str) -> bytes:
        assert_safe(url)
        status, _, body = request(port, url, host)
        assert status == 200, (url, status)
        return body

    seen: dict[bytes, bytes] = {}
    folders = [(b"", f"/r/{A}/files?dir=files")]
    while folders:
        folder, url = folders.pop()
        page = Links(get(url).decode())
        for u in page.urls:
            assert_safe(u)
        crumbs = [folder_of(a["hx-get"]) for a, _ in page.anchors if "dir=" in a.get("hx-get", "") and "class" not in a]
        parts = folder.split(b"/") if folder else []
        assert crumbs == [b"/".join(parts[:i]) for i in range(len(parts))], url  # files/, then each folder above
        for attrs, text in page.anchors:
            if attrs.get("class") == "dir":
                sub = folder_of(attrs["hx-get"])
                assert text == shown(os.fsdecode(sub.rsplit(b"/", 1)[-1])) + "/", (sub, text)
                folders.append((sub, attrs["hx-get"]))
            elif attrs.get("class") == "file":
                rel = names_in(attrs["href"], f"/r/{A}/view/files/")
                assert text == shown(os.fsdecode(rel.rsplit(b"/", 1)[-1])), (rel, text)
                view = Links(get(attrs["href"]).decode())  # the file's own page: its raw and download links
                raws = [a["href"] for a, _ in view.anchors if a.get("href", "").startswith(prefix)]
                assert len(raws) == 2, raws  # download, open raw
                for raw in raws:
                    assert names_in(raw, prefix) == rel
                    seen[rel] = get(raw)
                    assert seen[rel] == expected[rel], rel
            elif "download" in attrs:
                rel = names_in(attrs["href"], prefix)
                assert get(attrs["href"]) == expected[rel], rel
    assert seen == expected  # every file, each with its own bytes
    assert seen[b"/".join(CLIMB + [b"secret.txt"])] == DECOY


def test_hostile_names_in_chromium_open_and_download_their_own_file(hostile, viewer, page):
    """Clicks through a's files in the browser: each file's preview, its download links and its raw page give
    that file, and the `.%2e` chain's download gives a's decoy, never b's secret."""
    _, expected = hostile
    by_content = {v: k for k, v in expected.items()}
    page.goto(viewer.url(f"/r/{A}"))
    listing, preview = page.locator(f"#listing-{A}"), page.locator(f"#preview-{A}")
    # the listing shows `folder` once its breadcrumb ends in its name at its depth (.%2e/.%2e: same name)
    crumbs_are = ("([id, name, depth]) => { const c = document.querySelector('#' + id + ' .crumbs'); return c && "
                  "c.querySelector('b').textContent === name && c.querySelectorAll('a').length === depth; }")
    got: dict[bytes, bytes] = {}

    def in_folder(folder: bytes) -> None:
        name = shown(os.fsdecode(folder.rsplit(b"/", 1)[-1])) if folder else "files"
        page.wait_for_function(crumbs_are, arg=[f"listing-{A}", name, folder.count(b"/") + 1 if folder else 0])

    def visit(folder: bytes) -> None:
        in_folder(folder)
        files, dirs = listing.locator("a.file"), listing.locator("a.dir")
        for i in range(files.count()):
            page.evaluate(f"document.getElementById('preview-{A}').innerHTML = ''")
            files.nth(i).click()
            text = preview.locator("pre code").text_content().encode()
            rel = by_content[text]
            assert (rel.rsplit(b"/", 1)[0] if b"/" in rel else b"") == folder, rel
            with page.expect_download() as dl:
                preview.locator("h3 a[download]").click()
            assert Path(dl.value.path()).read_bytes() == expected[rel], rel
            with page.expect_download() as dl:
                files.nth(i).locator("xpath=..").locator("a[download]").click()
            assert Path(dl.value.path()).read_bytes() == expected[rel], rel
            with page.context.expect_page() as opened:
                preview.locator("a[target=_blank]").click()
            raw = opened.value
            raw.wait_for_load_state()
            assert raw.locator("body").text_content().encode() == expected[rel], rel
            raw.close()
            got[rel] = text
        for i in range(dirs.count()):
            sub = folder_of(dirs.nth(i).get_attribute("hx-get"))
            dirs.nth(i).click()
            visit(sub)
            listing.locator(".crumbs a").last.click()  # back up through the breadcrumb
            in_folder(folder)

    visit(b"")
    assert set(got) == set(expected)
    assert got[b"/".join(CLIMB + [b"secret.txt"])] == DECOY
    assert page.errors == []


def test_an_html_page_with_a_hostile_name_shows_in_its_sandboxed_frame(viewer, page):
    """The frame of a produced page still loads under frame-ancestors 'self' and the raw sandbox, and its
    script runs, when its name holds `?`, `#`, a space and `%2e`."""
    page.goto(viewer.url(f"/r/{B}"))
    page.locator(f"#listing-{B} a.file", has_text="p?a#g").click()
    frame = page.frame_locator(f"#preview-{B} iframe.page")
    assert frame.locator("#t").text_content() == "framed"
    expect(frame.locator("#s")).to_have_text("ran")
    assert page.errors == []
