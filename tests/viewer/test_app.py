"""The viewer in a real browser (headless Chromium) over folders recorded by real runs: the runs list and
its filters, a run's steps, produced files (a PNG, an HTML page in a sandboxed frame), the benchmark and
its side-by-side view, live updates, and paths that try to leave the run folder."""
from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect

from insandbox.core.trajectory import Trajectory
from insandbox.viewer.index import folder_id
from tests.viewer.conftest import serve

PLOT, BENCH = folder_id("plot"), folder_id("bench-chem")


@pytest.fixture(scope="module")
def viewer(recorded):
    served = serve(recorded)
    yield served
    served.stop()


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_runs_list_loads_and_a_filter_narrows_it(viewer, page):
    page.goto(viewer.url("/"))
    assert page.locator("tr.run-row").count() == 5  # the run and the benchmark's four samples
    assert page.locator("#benches").inner_text().count("bench-chem") == 1
    page.select_option("select[name=mode]", "llm")
    expect(page.locator("tr.run-row")).to_have_count(2)
    assert "mode=llm" in page.url  # the filter is in the address, so a link reproduces the view
    rows = page.locator("tr.run-row").all_inner_texts()
    assert all("plain" in r for r in rows)
    page.fill("input[name=q]", "q2")
    expect(page.locator("tr.run-row")).to_have_count(1)
    page.goto(viewer.url("/?score=wrong"))  # opened directly: the whole page, already filtered
    assert page.locator("tr.run-row").count() == 1 and "q2" in page.locator("tr.run-row").inner_text()
    assert page.errors == []


def test_a_runs_steps_render_with_commands_and_observations(viewer, page):
    page.goto(viewer.url(f"/r/{PLOT}"))
    assert page.locator("article.step").count() == 4
    first = page.locator("article.step").first
    assert "plt.savefig('/testbed/output/sine.png'" in first.locator("pre.command").inner_text()
    assert "sine.png" in first.locator("pre.observation").inner_text()  # the `ls -l` it ran
    assert "exit 0" in first.inner_text() and "A plot needs matplotlib" in first.locator(".reasoning").inner_text()
    editor = page.locator("article.step").nth(1)
    assert "/testbed/output/page.html" in editor.locator(".fields").inner_text()  # editor arguments as fields
    assert "submitted" in page.locator(".run-head").inner_text()
    page.wait_for_selector("a.file:has-text('sine.png')")  # the files listing loads by itself
    assert page.locator("a.file").count() == 3
    assert page.errors == []


def test_the_png_and_the_html_page_show(viewer, page):
    page.goto(viewer.url(f"/r/{PLOT}"))
    page.click("a.file:has-text('sine.png')")
    img = page.locator(f"#preview-{PLOT} img")
    img.wait_for()
    expect(img).to_have_js_property("complete", True)
    assert img.evaluate("el => el.naturalWidth") > 0
    page.goto(viewer.url(f"/r/{PLOT}/view/files/page.html"))
    frame_el = page.locator("iframe.page")
    assert frame_el.get_attribute("sandbox") == "allow-scripts"
    frame = page.frame_locator("iframe.page")
    assert frame.locator("#title").inner_text() == "Made in the sandbox"
    assert frame.locator("#by-script").inner_text() == "script ran"  # its script runs, in the sandbox
    # the frame has an opaque origin: nothing of the viewer is reachable from it
    origin = page.frames[1].evaluate("() => window.origin")
    assert origin == "null"
    page.goto(viewer.url(f"/r/{PLOT}/view/files/table.csv"))
    assert page.locator("table.data-table th").all_inner_texts() == ["x", "sin"]
    assert page.errors == []


def test_benchmark_view_and_both_trajectories_side_by_side(viewer, page):
    page.goto(viewer.url(f"/b/{BENCH}"))
    summary = page.locator("table.summary-table").inner_text()
    assert "sandbox" in summary and "plain" in summary and "50.0%" in summary and "100.0%" in summary
    assert page.locator("tr.item-row").count() == 2
    page.click("tr.item-row[data-item=q2] a.compare")
    page.wait_for_selector("section.column")
    columns = page.locator("section.column")
    assert columns.count() == 2
    sandbox, plain = columns.nth(0), columns.nth(1)
    assert sandbox.get_attribute("data-mode") == "sandbox" and plain.get_attribute("data-mode") == "llm"
    assert "echo A > /testbed/answer.txt; echo q2" in sandbox.locator("pre.command").inner_text()
    assert "Answer: B" in plain.locator(".reply").inner_text()
    assert page.errors == []


def test_the_benchmark_shows_its_report_figures_and_opens_report_html(viewer, page):
    page.goto(viewer.url(f"/b/{BENCH}"))
    figures = page.locator(".figures img")
    assert figures.count() >= 2
    for i in range(figures.count()):
        expect(figures.nth(i)).to_have_js_property("complete", True)
        assert figures.nth(i).evaluate("el => el.naturalWidth") > 0
    with page.context.expect_page() as opened:
        page.click("a.report-html")
    report = opened.value
    report.wait_for_load_state()
    assert report.locator("h1").inner_text() == "Benchmark report"
    embedded = report.locator("img")
    assert embedded.count() >= 2
    for i in range(embedded.count()):  # data: URIs, drawn under the viewer's policy for report files
        assert embedded.nth(i).get_attribute("src").startswith("data:image/png;base64,")
        assert embedded.nth(i).evaluate("el => el.naturalWidth") > 0
    assert page.errors == []


def test_the_benchmark_shows_how_many_sandbox_samples_made_no_tool_call(viewer, docker_image, tmp_path, page):
    """Regression: a benchmark whose model never had its tools looked like any other. The summary (and the
    live tally of a benchmark still running) counts the sandbox samples without a tool call, and warns when
    they are most of them."""
    page.goto(viewer.url(f"/b/{BENCH}"))  # the model called its tools: no warning
    cells = page.locator("table.summary-table td.no-tool-call")
    assert cells.all_inner_texts() == ["0 of 2", "–"]  # sandbox, plain
    assert page.locator("#bench-summary .warning").count() == 0 and page.locator("td.no-tool-call.warn").count() == 0

    from concurrent.futures import ThreadPoolExecutor

    from tests.viewer.recorded import record_bench_without_tool_calls

    root = tmp_path / "runs"
    with ThreadPoolExecutor(1) as thread:  # its own event loop: Playwright's runs in this thread
        thread.submit(record_bench_without_tool_calls, root / "bench-no-tools", docker_image).result()
    shutil.copytree(root / "bench-no-tools", root / "bench-running")
    (root / "bench-running" / "summary.json").unlink()  # as while it runs: the tally counts from the records
    served = serve(root)
    try:
        url = served.url(f"/b/{folder_id('bench-no-tools')}")
        page.goto(url)
        warning = page.locator("#bench-summary p.warning")
        assert warning.count() == 1
        text = " ".join(warning.inner_text().split())
        assert text.startswith("warning: chem: 2 of 2 sandbox-mode samples made no tool call") and \
            "try --tool-format text" in text
        cell = page.locator("table.summary-table td.no-tool-call")
        assert cell.inner_text() == "2 of 2" and "warn" in cell.get_attribute("class")
        page.goto(served.url(f"/b/{folder_id('bench-running')}"))
        tally = page.locator("table.tally td.no-tool-call")
        assert tally.inner_text() == "2 of 2" and "warn" in tally.get_attribute("class")
        assert page.locator("#bench-summary p.warning").count() == 1
        assert page.errors == []
    finally:
        served.stop()


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_examples_recorded_runs_show_every_kind_of_produced_file(page):
    """The case studies' recorded runs (examples/): map (HTML), poster (PNG and SVG), video (MP4), music (WAV, MIDI)."""
    served = serve(EXAMPLES)
    try:
        def open_file(example: str, name: str):
            page.goto(served.url(f"/r/{folder_id(f'{example}/recorded')}/view/files/{name}"))

        open_file("travel_map", "map.html")
        assert "Rome" in page.frame_locator("iframe.page").locator("h1").inner_text()
        for name in ("poster.png", "poster.svg"):
            open_file("poster", name)
            img = page.locator("main img").first
            expect(img).to_have_js_property("complete", True)
            assert img.evaluate("el => el.naturalWidth") > 0, name
        open_file("video", "explainer.mp4")
        video = page.locator("video")
        expect(video).to_have_js_property("readyState", 4)  # decoded enough to play through
        assert video.evaluate("el => el.videoWidth") == 480
        open_file("music", "theme.wav")
        audio = page.locator("audio")
        expect(audio).to_have_js_property("readyState", 4)
        assert round(audio.evaluate("el => el.duration")) == 10
        open_file("music", "theme.mid")
        assert page.locator("table tr").count() > 10  # its notes, as a table
        assert page.errors == []
    finally:
        served.stop()


def test_a_running_trajectory_and_benchmark_update_in_the_open_page(recorded, tmp_path, page):
    """A step appended to an open run's trajectory and a result appended to an open benchmark appear."""
    root = tmp_path / "runs"
    shutil.copytree(recorded / "plot", root / "plot")
    shutil.copytree(recorded / "bench-chem", root / "bench-chem")
    traj_path = root / "plot" / "trajectory.json"
    full = Trajectory.load(traj_path)
    partial = Trajectory.load(traj_path)
    partial.steps = partial.steps[:2]
    partial.end(None)
    partial.save(traj_path)
    results = root / "bench-chem" / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    results.write_text("".join(lines[:3]))
    (root / "bench-chem" / "summary.json").unlink()  # written when a bench ends: without it, it is running
    served = serve(root)
    try:
        page.goto(served.url(f"/r/{PLOT}"))
        assert page.locator("article.step").count() == 2
        assert page.locator(".run-head .badge.live").count() == 1
        page.wait_for_selector("body[data-live-open]", state="attached")  # the page's event stream is open
        full.save(traj_path)  # the run goes on: two more steps, then it ends
        expect(page.locator("article.step")).to_have_count(4, timeout=10000)
        assert "Submitted." in page.locator("article.step").nth(3).inner_text()
        page.wait_for_selector(".run-head .badge.ok", timeout=10000)  # the header follows: submitted

        page.goto(served.url(f"/b/{BENCH}"))
        assert page.locator(".results-count").inner_text() == "3"
        last = json.loads(lines[3])
        scores = page.locator(f"tr.item-row[data-item={last['id']}] .score-0, "
                              f"tr.item-row[data-item={last['id']}] .score-1")
        assert scores.count() == 1  # its other sample is there, from its trajectory, without a score yet
        page.wait_for_selector("body[data-live-open]", state="attached")
        with results.open("a") as f:
            f.write(lines[3])
        expect(page.locator(".results-count")).to_have_text("4", timeout=10000)
        expect(scores).to_have_count(2, timeout=10000)

        results.write_text("".join(lines[:3]))  # the runs list's benchmarks table follows too
        page.goto(served.url("/"))
        count = page.locator("#benches td.num")
        expect(count).to_have_text("3")
        page.wait_for_selector("body[data-live-open]", state="attached")
        with results.open("a") as f:
            f.write(lines[3])
        expect(count).to_have_text("4", timeout=10000)
        assert page.errors == []
    finally:
        served.stop()


def test_paths_outside_the_run_folder_are_refused(recorded, viewer):
    (recorded / "plot" / "files" / "escape").symlink_to("/etc/passwd")
    (recorded / "plot" / "files" / "up").symlink_to(recorded)
    try:
        for bad in ("files/escape", "files/up/plot/answer.txt", "files/../../bench-chem/bench.json", "..%2Fbench-chem",
                    "files/%2E%2E/%2E%2E/bench-chem/bench.json", "/etc/passwd", "files/%00"):
            for route in ("raw", "view"):
                assert _status(viewer.url(f"/r/{PLOT}/{route}/{bad}")) in (400, 403, 404), (route, bad)
        assert _status(viewer.url(f"/r/{PLOT}/files?dir=files/up")) == 404
        assert _status(viewer.url(f"/r/{PLOT}/files?dir=..")) == 404
        assert _status(viewer.url(f"/b/{BENCH}/report/../bench.json")) == 404
        assert _status(viewer.url(f"/r/{PLOT}/raw/files/sine.png")) == 200
        with urllib.request.urlopen(viewer.url(f"/r/{PLOT}/raw/files/page.html")) as r:
            csp = r.headers["Content-Security-Policy"]
        assert "sandbox allow-scripts" in csp and "allow-same-origin" not in csp and "connect-src 'none'" in csp
    finally:
        (recorded / "plot" / "files" / "escape").unlink()
        (recorded / "plot" / "files" / "up").unlink()
