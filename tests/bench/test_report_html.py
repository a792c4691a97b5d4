"""report.html: the report in one self-contained page, its numbers those of report.json, names from runs escaped."""
from __future__ import annotations

import base64
import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

from insandbox.bench.report_files import write_report
from insandbox.bench.report_html import inline, render_report_html
from tests.helpers import cli

REPORT_RUN = Path(__file__).parents[1] / "data" / "report_run"
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Page(HTMLParser):
    """The page's tables (cell texts), every src and href, and whether its tags nest properly."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.misnested: list[str] = []
        self.tags: set[str] = set()
        self.links: list[tuple[str, str]] = []
        self.tables: list[list[list[str]]] = []
        self.cell: list[str] | None = None
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.links += [(k, v or "") for k, v in attrs if k in ("src", "href", "srcset", "action", "data")]
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = []
        if tag not in VOID:
            self.open.append(tag)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.open or self.open[-1] != tag:
            self.misnested.append(f"</{tag}> closes <{self.open[-1] if self.open else None}>")
            return
        self.open.pop()
        if tag in ("td", "th"):
            self.tables[-1][-1].append("".join(self.cell).strip())
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)

    def table(self, first_header: list[str]) -> list[list[str]]:
        """The rows (header first) of the table whose header starts with these columns."""
        found = [t for t in self.tables if t and t[0][:len(first_header)] == first_header]
        assert len(found) == 1, [t[0] for t in self.tables]
        return found[0]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def test_report_html_holds_the_tables_and_embeds_every_figure(tmp_path):
    """tests/data/report_run: chem, q1-q4 in both modes, q5 a sandbox infrastructure error."""
    out, data = write_report([REPORT_RUN], tmp_path / "report")
    html = (out / "report.html").read_text(encoding="utf-8")
    # what a viewer does: the page again from report.json and the figure files
    again = render_report_html(json.loads((out / "report.json").read_text()), sorted(out.glob("*.png")))
    assert again == html
    page = Page(html)
    assert page.open == [] and page.misnested == []
    assert {"html", "head", "body", "style", "table", "figure", "figcaption"} <= page.tags
    assert not page.tags & {"script", "link", "iframe", "object", "embed"}  # nothing to run, nothing to fetch

    acc = page.table(["run", "task", "mode", "items", "samples", "accuracy", "95% CI"])
    by_mode = {row[2]: row for row in acc[1:]}
    assert len(acc) - 1 == len(data["accuracy"]) == 2
    for a in data["accuracy"]:
        row = by_mode[a["mode"]]
        assert row[3:7] == [str(a["items"]), str(a["n"]), _pct(a["accuracy"]),
                            f"{_pct(a['ci95'][0])} - {_pct(a['ci95'][1])}"]
    assert by_mode["sandbox"][3:9] == ["5", "5", "60.0%", "23.1% - 88.2%", "1", "75.0%"]
    paired = page.table(["run", "task", "pairs"])[1]
    assert paired[2:7] == ["4", "75.0%", "25.0%", "+50.0 pt", "-41.9 .. +100.0"] and paired[-1] == "0.5"
    cap = page.table(["run", "task", "runs", "turns"])[1]
    assert cap[2:4] == ["4", "9"] and cap[5:] == ["11.1%", "33.3%", "22.2%"]
    assert page.table(["run", "task", "mode", "initial prompt"])[1:] and page.table(["run", "task", "mode",
                                                                                      "samples", "model time"])[1:]
    # the numbers are set right-aligned, the names not
    assert '<th class="num">accuracy</th>' in html and '<th class="num">run</th>' not in html

    items = page.table(["task", "item", "sandbox", "llm", "sandbox − llm"])
    assert [r[1] for r in items[1:]] == ["q1", "q2", "q3", "q4", "q5"]
    assert items[2][2:] == ["1", "0", "+1"] and items[5][2:] == ["error", "-", "-"]
    settings = page.table(["setting"])
    assert ["model", "fixture-model"] in settings and ["task", "chem"] in settings

    # every figure drawn is in the page, byte for byte, as a data: URI; nothing points outside the file
    srcs = [v for k, v in page.links if k == "src"]
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    embedded = {base64.b64decode(s.split(",", 1)[1]) for s in srcs}
    pngs = sorted(out.glob("*.png"))
    assert [p.name for p in pngs] == ["accuracy.png", "capabilities.png", "time.png", "tokens.png"]
    assert embedded == {p.read_bytes() for p in pngs}
    assert all(v.startswith("#") for k, v in page.links if k == "href")  # the contents: anchors within the page
    for outside in ('src="http', 'src="file', "url(", "@import", 'href="http'):
        assert outside not in html
    for caption in ("95% intervals", "external resources, file management", "initial prompt, completion",
                    "in model calls, in tools"):
        assert caption in html


def test_names_from_runs_are_escaped(tmp_path):
    """A model, task and item named like markup come out as text, never as elements."""
    run = tmp_path / "hostile"
    shutil.copytree(REPORT_RUN, run)
    model, task, item = "<script>alert('model')</script>", "chem<script>alert(1)</script>", '<img src=x onerror="y">'
    meta = json.loads((run / "bench.json").read_text())
    meta["config"]["run"]["model"], meta["task"]["name"] = model, task
    (run / "bench.json").write_text(json.dumps(meta))
    (run / "summary.json").write_text(json.dumps({"model": model}))
    records = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    for r in records:
        r["task"] = task
        if r["id"] == "q2":
            r["id"] = item
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    r = cli("report", str(run), "--out", str(tmp_path / "report"), "--no-plots")
    assert r.returncode == 0, r.stderr
    assert "report.html" in r.stdout
    html = (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
    page = Page(html)
    assert page.open == [] and page.misnested == []
    assert "script" not in page.tags and [v for k, v in page.links if k == "src"] == []
    assert "<script>" not in html and "<img" not in html
    assert "&lt;script&gt;alert(" in html and "&lt;img src=x onerror=&#34;y&#34;&gt;" in html
    acc = page.table(["run", "task", "mode", "items"])
    assert {row[0] for row in acc[1:]} == {model} and {row[1] for row in acc[1:]} == {task}  # as text, intact
    assert [row[1] for row in page.table(["task", "item"])[1:]] == [item, "q1", "q3", "q4", "q5"]  # "<" sorts first


def test_the_items_table_is_bounded(tmp_path):
    _, data = write_report([REPORT_RUN], tmp_path / "r", plots=False)
    page = Page(render_report_html(data, [], item_limit=2))
    assert [row[1] for row in page.table(["task", "item"])[1:]] == ["q1", "q2"]
    assert "The first 2 of 5 items; all of them are in report.json" in render_report_html(data, item_limit=2)


def test_figures_drawn_in_memory_and_code_spans():
    """A figure given as bytes (a viewer drawing in memory), with no table to sit by, goes to Figures."""
    data = {"runs": [], "accuracy": [], "paired": [], "choice_extractions": [], "capabilities": [], "tokens": [],
            "token_ratio": [], "cost": [], "time": [], "poolable": [], "items": []}
    html = render_report_html(data, [("extra.svg", b"<svg xmlns='http://www.w3.org/2000/svg'/>")])
    assert 'id="figures"' in html and "data:image/svg+xml;base64," in html and "<svg" not in html
    assert str(inline("run `a<b` now")) == "run <code>a&lt;b</code> now"
    assert str(inline("one ` alone")) == "one ` alone"
