"""Training folders in the viewer: the per-step series and their SVG charts, the routes over a folder written by
the trainer's own writers (tests/viewer/training.py), one still being written, a hostile one, and the page in
Chromium."""
from __future__ import annotations

import json
import os
import re
import shutil

import pytest
from starlette.testclient import TestClient

from insandbox.viewer import training as T
from insandbox.viewer.app import make_app
from insandbox.viewer.index import Index, folder_id
from tests.viewer.conftest import serve
from tests.viewer.synthetic import write_run
from tests.viewer.training import write_training

TID = folder_id("train/smoke")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A run beside a training of 3 steps (of 5), written the way `rl train` writes them."""
    root = tmp_path_factory.mktemp("trainings")
    write_training(root / "train" / "smoke", steps=3, max_steps=5)
    write_run(root / "a-run")
    return root


@pytest.fixture(scope="module")
def client(root):
    return TestClient(make_app(root), base_url="http://127.0.0.1")


# ---------------------------------------------------------------------- series and charts
def test_metrics_rows_become_series_with_gaps_and_the_last_row_of_a_step():
    data = b"\n".join([
        json.dumps({"step": 1, "loss": 0.5, "reward_mean": 0.2, "reward_std": 0.1, "rollouts_per_min": 6,
                    "exit_reasons": {"submitted": 3, "max_steps": 1}}).encode(),
        json.dumps({"step": 2, "loss": None, "reward_mean": "high", "exit_reasons": {"submitted": 4}}).encode(),
        json.dumps({"step": 1, "loss": 0.4, "reward_mean": 0.3, "exit_reasons": {"submitted": 2, "x": -1}}).encode(),
        b"[1, 2]", b"", b'{"step": 3, "loss": 0.',  # not a row, a blank line, a row still being written
    ])
    m = T.parse_metrics(data)
    assert [r["step"] for r in m.rows] == [1, 2] and m.skipped == 2 and not m.missing
    s = T.series(m.rows)
    assert s.steps == [1, 2] and s.loss == [0.4, None] and s.reward_mean == [0.3, None]
    assert s.reward_std == [None, None] and s.rollouts_per_min == [None, None]
    assert s.exit_reasons == {"submitted": [2, 4]}  # a negative count is no count
    assert T.parse_metrics(None).missing and T.parse_metrics(b"").rows == []


def test_numbers_that_are_not_figures_are_gaps():
    assert [T.number(v) for v in (1, 2.5, True, "3", None, float("nan"), float("inf"), 10 ** 400)] == \
        [1.0, 2.5, None, None, None, None, None, None]
    s = T.series([{"step": 1, "loss": 1e300}, {"step": 2, "loss": 1.0}])
    assert s.loss == [None, 1.0]  # beyond the charts' scale: a gap, the other points still drawn


def test_ticks_are_round_and_cover_the_range():
    assert T.nice_ticks(0.0147, 0.052) == [0.01, 0.02, 0.03, 0.04, 0.05, 0.06]
    assert T.nice_ticks(0, 4) == [0, 1, 2, 3, 4]
    ticks = T.nice_ticks(-0.37, 1.21)
    assert ticks[0] <= -0.37 and ticks[-1] >= 1.21 and len(ticks) <= 6


def test_line_chart_draws_a_band_breaks_at_gaps_and_links_points():
    svg = str(T.line_chart("reward", "reward", [1, 2, 3, 4], [0.1, 0.5, None, 0.7], [0.1, 0.2, None, 0.0],
                           link=lambda s: f"/steps/{s}" if s != 4 else None))
    assert svg.startswith("<svg") and svg.endswith("</svg>") and 'data-chart="reward"' in svg
    assert svg.count("<polyline") == 2 and svg.count('class="band"') == 2  # the gap at step 3 splits both
    assert svg.count('<circle class="point"') == 3 and "step 2: 0.5 ± 0.2" in svg
    assert svg.count('<a href="/steps/') == 2  # step 4's point has no rollouts to link to
    empty = str(T.line_chart("loss", "loss", [1, 2], [None, None]))
    assert "no steps yet" in empty and "<polyline" not in empty


def test_stacked_bars_stack_each_steps_exit_reasons():
    svg = str(T.stacked_bars("exits", "exits", [1, 2], {"submitted": [3, 1], "max_steps": [1, 0]}, link=str))
    assert svg.count('<rect class="bar"') == 3 and 'data-reason="max_steps"' in svg
    heights = [float(h) for h in re.findall(r'<rect class="bar"[^>]*height="([\d.]+)"', svg)]
    assert heights[0] == pytest.approx(3 * heights[1], rel=0.02) and heights[2] == pytest.approx(heights[1])
    assert "submitted 4" in svg and "max_steps 1" in svg  # the legend's totals
    assert 'href="1"' in svg and 'href="2"' in svg


def test_charts_escape_what_the_folder_named():
    svg = str(T.stacked_bars("exits", "exits", [1], {"<img src=x onerror=alert(1)>": [2]}))
    assert "<img" not in svg and "&lt;img src=x onerror=alert(1)&gt;" in svg


# ---------------------------------------------------------------------- routes
def test_the_index_lists_the_training_with_its_kind(root, client):
    index = Index(root).scan()
    [t] = index.trainings
    assert t.tid == TID and t.kind == "training" and t.steps == 3 and t.max_steps == 5 and t.model == "embedded"
    assert not t.finished and t.last_reward is not None
    assert [r.rel for r in index.runs] == ["a-run"]  # the training's rollouts are not runs
    page = client.get("/").text
    assert f'href="/train/{TID}"' in page and 'data-kind="training"' in page


def test_a_folder_that_is_one_training_opens_on_it(root, tmp_path):
    shutil.copytree(root / "train" / "smoke", tmp_path / "only")
    answer = TestClient(make_app(tmp_path / "only"), base_url="http://127.0.0.1").get("/", follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == f"/train/{folder_id('.')}"


def test_the_training_page_has_the_four_charts_and_a_row_per_step(client):
    answer = client.get(f"/train/{TID}")
    assert answer.status_code == 200
    page = answer.text
    for chart in ("reward", "loss", "exits", "speed"):
        assert f'data-chart="{chart}"' in page
    assert page.count('class="step-row"') == 3
    assert page.count(f'href="/train/{TID}/step/2"') >= 2  # the step row and the chart points and bar
    assert "max_steps" in page and "time_limit" in page


def test_a_steps_rollouts_link_to_their_trajectories_in_the_run_view(client):
    page = client.get(f"/train/{TID}/step/2").text
    assert page.count('class="rollout-row"') == 4 and "t1/g0/s1" in page and "masked" in page
    run = client.get(f"/train/{TID}/step/2/1")
    assert run.status_code == 200
    assert run.text.count('<article class="step"') == 3 and "echo t1-3" in run.text  # t1/g0/s1: 3 steps
    assert f'href="/train/{TID}/step/2"' in run.text  # back to the step
    more = client.get(f"/train/{TID}/step/2/1/steps?start=2")
    assert more.status_code == 200 and more.text.count('<article class="step"') == 1
    assert client.get(f"/train/{TID}/step/9").status_code == 404
    assert client.get(f"/train/{TID}/step/2/99").status_code == 404
    assert client.get("/train/nosuchid").status_code == 404
    assert client.get(f"/train/{TID}/step/..%2F..%2Fetc").status_code == 404


def test_a_training_being_written_shows_what_it_has(root, tmp_path):
    folder = shutil.copytree(root / "train" / "smoke", tmp_path / "t")
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    (folder / "metrics.jsonl").write_text(lines[0] + "\n" + lines[1][:40])  # the second row half written
    with open(folder / "rollouts" / "step-00003.jsonl", "a") as f:
        f.write('{"id": "cut')
    client = TestClient(make_app(tmp_path), base_url="http://127.0.0.1")
    tid = folder_id("t")
    page = client.get(f"/train/{tid}")
    assert page.status_code == 200 and page.text.count('class="step-row"') == 3  # steps 2, 3: rollouts only
    assert "1 line of metrics.jsonl could not be read" in page.text
    step = client.get(f"/train/{tid}/step/3")
    assert step.status_code == 200 and step.text.count('class="rollout-row"') == 4 and "1 line could not" in step.text
    (folder / "metrics.jsonl").unlink()
    page = client.get(f"/train/{tid}")
    assert page.status_code == 200 and "no metrics.jsonl here" in page.text and "no steps yet" in page.text
    (folder / "metrics.jsonl").write_text("")  # as the trainer leaves it before its first step
    shutil.rmtree(folder / "rollouts")
    page = client.get(f"/train/{tid}")
    assert page.status_code == 200 and page.text.count("no steps yet") == 5  # 4 charts, the table


def test_a_rollout_without_a_trajectory_says_so(tmp_path):
    write_training(tmp_path / "t", steps=1)
    path = tmp_path / "t" / "rollouts" / "step-00001.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    recs[0]["trajectory"] = {}
    recs[1]["trajectory"] = {"run_id": 5, "steps": "no"}
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    client = TestClient(make_app(tmp_path), base_url="http://127.0.0.1")
    tid = folder_id("t")
    assert "(no trajectory)" in client.get(f"/train/{tid}/step/1").text
    assert client.get(f"/train/{tid}/step/1/0").status_code == 422
    assert client.get(f"/train/{tid}/step/1/1").status_code == 422


# ---------------------------------------------------------------------- a hostile folder
EVIL = '<script>alert("x")</script>'


def test_a_hostile_training_is_escaped_and_its_links_out_are_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = {"step": 1, "loss": 0.123456789, "reward_mean": 0.987654321,
              "exit_reasons": {"secret_reason_outside": 1}}
    (outside / "metrics.jsonl").write_text(json.dumps(secret) + "\n")
    (outside / "step-00007.jsonl").write_text("{}\n")
    root = tmp_path / "root"
    evil = write_training(root / "evil", steps=1)
    (evil / "config.yaml").write_text(f"model: '{EVIL}'\ngrpo: {{max_steps: '{EVIL}'}}\n")
    row = json.loads((evil / "metrics.jsonl").read_text())
    row["exit_reasons"] = {EVIL: 2, "<b>bold</b>": 1}
    (evil / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    path = evil / "rollouts" / "step-00001.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    recs[0].update(id=EVIL, exit_reason=EVIL, exit_detail=EVIL, reward=EVIL, timings={"wall_s": EVIL})
    recs[0]["trajectory"]["task"]["id"] = EVIL
    recs[0]["trajectory"]["steps"][0]["content"] = EVIL
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    # a second training whose metrics.jsonl and a step file are links out of the root
    linked = write_training(root / "linked", steps=1)
    (linked / "metrics.jsonl").unlink()
    os.symlink(outside / "metrics.jsonl", linked / "metrics.jsonl")
    os.symlink(outside / "step-00007.jsonl", linked / "rollouts" / "step-00007.jsonl")
    # and a training folder that is itself a link out of the root
    os.symlink(evil, root / "link-to-evil")

    client = TestClient(make_app(root), base_url="http://127.0.0.1")
    index = Index(root).scan()
    assert sorted(t.rel for t in index.trainings) == ["evil", "linked"]  # a linked folder is not walked
    evil_id = folder_id("evil")
    pages = [client.get(url) for url in ("/", f"/train/{evil_id}", f"/train/{evil_id}/step/1",
                                         f"/train/{evil_id}/step/1/0")]
    for answer in pages:
        assert answer.status_code == 200, answer.url
        assert "<script>alert" not in answer.text and "<b>bold" not in answer.text
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in pages[1].text
    assert "&lt;b&gt;bold&lt;/b&gt;" in pages[1].text
    assert pages[2].text.count("&lt;script&gt;") >= 2 and pages[3].text.count("&lt;script&gt;") >= 2

    page = client.get(f"/train/{folder_id('linked')}")
    assert page.status_code == 200 and "no metrics.jsonl here" in page.text
    assert "secret_reason_outside" not in page.text and "0.9877" not in page.text
    assert 'data-step="7"' not in page.text  # a linked step file is no step's
    assert T.read_metrics(linked).missing and 7 not in T.step_files(linked)
    assert T.read_inside(linked, "rollouts/step-00007.jsonl", 100) is None
    assert client.get(f"/train/{folder_id('linked')}/step/7").status_code == 404


# ---------------------------------------------------------------------- Chromium
def test_the_training_page_in_chromium_charts_and_a_rollout_link(root, page):
    served = serve(root)
    try:
        page.goto(served.url("/"))
        page.click(f"a[href='/train/{TID}']")
        page.wait_for_url(f"**/train/{TID}")
        charts = page.locator("svg.chart")
        assert charts.count() == 4
        for i in range(4):
            box = charts.nth(i).bounding_box()
            assert box and box["width"] > 200 and box["height"] > 80
        assert page.locator("svg.chart[data-chart=reward] polygon.band").count() == 1
        assert page.locator("svg.chart[data-chart=exits] rect.bar").count() == 9  # 3 steps x 3 reasons
        page.locator("svg.chart[data-chart=exits] a").nth(1).locator("rect").first.click()  # a bar: step 2
        page.wait_for_url(f"**/train/{TID}/step/2")
        assert page.locator("tr.rollout-row").count() == 4
        page.click("tr.rollout-row[data-index='1'] a.rollout")
        page.wait_for_url(f"**/train/{TID}/step/2/1")
        assert page.locator("article.step").count() == 3
        assert "t1/g0/s1" in page.locator(".run-head").inner_text()
        assert page.errors == []
    finally:
        served.stop()


def test_a_finished_trainings_event_stream_ends_at_once(root, tmp_path):
    folder = shutil.copytree(root / "train" / "smoke", tmp_path / "t")
    (folder / "summary.json").write_text(json.dumps({"steps": 3, "rollouts": 12, "phases": {"total_s": 99.0}}))
    client = TestClient(make_app(tmp_path), base_url="http://127.0.0.1")
    tid = folder_id("t")
    with client.stream("GET", f"/train/{tid}/events") as answer:
        assert "event: end" in "".join(answer.iter_text())
    page = client.get(f"/train/{tid}").text
    assert "data-live" not in page and "total_s" in page and "unfinished" not in page
