"""Finding runs and benchmarks, reading summaries cheaply, and paging big trajectories and folders
(no browser: the HTTP answers of the app, in process)."""
from __future__ import annotations

import json

from starlette.testclient import TestClient

from insandbox.viewer import index as index_module
from insandbox.viewer.app import make_app
from insandbox.viewer.index import Index, folder_id
from insandbox.viewer.trajectories import read_summary
from tests.viewer.synthetic import write_files, write_run


def test_a_thousand_step_run_is_paged(tmp_path):
    write_run(tmp_path / "big", steps=1000, output_chars=3000)
    client = TestClient(make_app(tmp_path), base_url="http://127.0.0.1")  # a Host the viewer answers
    rid = folder_id("big")
    page = client.get(f"/r/{rid}").text
    assert page.count('<article class="step"') == 50
    assert f"/r/{rid}/steps?start=50&n=50" in page  # what loads the next page
    assert "echo step-50<" in page and "echo step-51<" not in page
    assert page.count("<details><summary>all 3,000 characters") == 50  # long observations start collapsed
    later = client.get(f"/r/{rid}/steps?start=950&n=50", headers={"HX-Request": "true"}).text
    assert later.count('<article class="step"') == 50 and "echo step-1000<" in later
    assert "steps?start=1000" not in later  # the last page: nothing more to load
    assert "billed so far 50,070,000" in later  # tokens billed up to step 1000: sum of 100*i + 20


def test_the_summary_of_a_big_trajectory_is_read_from_its_ends(tmp_path):
    traj = write_run(tmp_path / "big", steps=400, output_chars=2000, task_id="item-7")
    path = tmp_path / "big" / "trajectory.json"
    assert path.stat().st_size > 1024 * 1024
    summary = read_summary(path)
    assert summary["task"]["id"] == "item-7" and summary["config"]["model"] == "synthetic-model"
    assert summary["exit_reason"] == "submitted" and summary["totals"] == traj.totals.model_dump()
    path.write_text(json.dumps(json.loads(path.read_text())))  # written some other way: parsed whole
    assert read_summary(path)["totals"]["steps"] == 400


def test_a_folder_of_many_files_is_listed_page_by_page(tmp_path):
    write_run(tmp_path / "run")
    write_files(tmp_path / "run" / "files", 2500)
    client = TestClient(make_app(tmp_path), base_url="http://127.0.0.1")  # a Host the viewer answers
    rid = folder_id("run")
    first = client.get(f"/r/{rid}/files?dir=files").text
    assert first.count('class="file"') == 200 and "2,500 entries" in first and "page 1 of 13" in first
    last = client.get(f"/r/{rid}/files?dir=files&page=12").text
    assert last.count('class="file"') == 100 and "f002499.txt" in last
    found = client.get(f"/r/{rid}/files?dir=files&q=f00249").text
    assert found.count('class="file"') == 10 and "10 entries" in found


def test_runs_benchmark_samples_and_live_results_are_found(tmp_path, monkeypatch):
    write_run(tmp_path / "a" / "run1", task_id="t1")
    write_run(tmp_path / "a" / "run1" / "forks" / "step-1" / "branch-0")  # a fork inside a run
    write_run(tmp_path / "a" / "run1" / "files" / "not-a-run")  # what a model left is never a run
    bench = tmp_path / "bench"
    (bench / "bench.json").parent.mkdir()
    (bench / "bench.json").write_text(json.dumps({"task": {"name": "chem"}, "config": {"run": {"model": "m"}},
                                                  "row_ids": ["q1"], "modes": ["sandbox", "llm"], "repeats": 1}))
    write_run(bench / "samples" / "sandbox" / "q1" / "r0", task_id="q1")
    write_run(bench / "samples" / "llm" / "q1" / "r0", task_id="q1", finished=False)  # still running
    record = {"id": "q1", "task": "chem", "mode": "sandbox", "repeat": 0, "score": 1.0, "exit_reason": "submitted",
              "steps": 3, "billed_tokens": 99, "trajectory": "samples/sandbox/q1/r0/trajectory.json"}
    (bench / "results.jsonl").write_text(json.dumps(record) + "\n" + '{"id": "q1", "half')  # a line being written
    index = Index(tmp_path, min_interval_s=0).scan()
    assert sorted(r.rel for r in index.runs) == ["a/run1", "a/run1/forks/step-1/branch-0",
                                                 "bench/samples/llm/q1/r0", "bench/samples/sandbox/q1/r0"]
    (b,) = index.benches
    assert b.task == "chem" and b.model == "m" and b.live and len(b.records) == 1
    sample = index.by_rid[folder_id("bench/samples/sandbox/q1/r0")]
    assert (sample.score, sample.tokens, sample.bench, sample.model) == (1.0, 99, b.bid, "m")  # from its record
    running = index.by_rid[folder_id("bench/samples/llm/q1/r0")]
    assert running.live and running.score is None and running.mode == "llm" and running.item == "q1"
    # nothing changed: no trajectory is read again
    reads = []
    monkeypatch.setattr(index_module, "read_summary", lambda p: reads.append(p) or {})
    index.scan()
    assert reads == []
    with (bench / "results.jsonl").open("a") as f:  # the half line completes, another sample's record follows
        f.write('"}\n' + json.dumps({**record, "mode": "llm", "score": 0.0,
                                     "trajectory": "samples/llm/q1/r0/trajectory.json"}) + "\n")
    index.scan()
    assert index.by_rid[folder_id("bench/samples/llm/q1/r0")].score == 0.0 and len(index.benches[0].records) == 2


def test_a_running_benchmark_of_the_default_model_is_named_by_its_samples(tmp_path):
    """bench.json has no model name for the embedded default model and summary.json comes at the end: the model
    is the one its first finished sample's trajectory names."""
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "bench.json").write_text(json.dumps({"task": {"name": "math"}, "config": {"run": {"model": None}},
                                                  "row_ids": ["q1"], "modes": ["sandbox"], "repeats": 1}))
    write_run(bench / "samples" / "sandbox" / "q1" / "r0", task_id="q1", model="SmolLM2-135M-Instruct.Q4_1")
    record = {"id": "q1", "task": "math", "mode": "sandbox", "repeat": 0, "score": 0.0, "exit_reason": "submitted",
              "trajectory": "samples/sandbox/q1/r0/trajectory.json"}
    index = Index(tmp_path, min_interval_s=0).scan()
    assert index.benches == [] or index.benches[0].model is None  # no sample finished yet
    (bench / "results.jsonl").write_text(json.dumps(record) + "\n")
    (b,) = index.scan().benches
    assert b.model == "SmolLM2-135M-Instruct.Q4_1"
    assert index.by_rid[folder_id("bench/samples/sandbox/q1/r0")].model == "SmolLM2-135M-Instruct.Q4_1"


def test_a_damaged_trajectory_is_listed_as_unreadable_and_its_page_says_why(tmp_path):
    write_run(tmp_path / "good")
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "trajectory.json").write_text('{"run_id": "x", "steps": [')  # runs write atomically
    (tmp_path / "invalid").mkdir()
    (tmp_path / "invalid" / "trajectory.json").write_text(json.dumps({"run_id": "y", "steps": [{"index": "one"}]}))
    (tmp_path / "list").mkdir()
    (tmp_path / "list" / "trajectory.json").write_text("[]")
    index = Index(tmp_path, min_interval_s=0).scan()
    by_rel = {r.rel: r for r in index.runs}
    assert sorted(by_rel) == ["cut", "good", "invalid", "list"]
    assert by_rel["good"].exit_reason == "submitted"
    assert by_rel["cut"].exit_reason == "unreadable" and "cannot be read" in by_rel["cut"].error
    assert by_rel["list"].exit_reason == "unreadable" and "not a trajectory" in by_rel["list"].error
    client = TestClient(make_app(tmp_path), base_url="http://127.0.0.1")  # a Host the viewer answers
    assert client.get("/").status_code == 200
    for rel in ("cut", "invalid", "list"):
        page = client.get(f"/r/{folder_id(rel)}")
        assert page.status_code == 422, rel
        assert "cannot be read as a trajectory" in page.text
    assert client.get(f"/r/{folder_id('good')}").status_code == 200


def test_a_hostile_trajectory_is_listed_as_unreadable_never_a_crash(tmp_path):
    """Nested past the parser's depth (in the file, or in a tool call's arguments), or made of so many tiny
    values that loading it would take far more memory than its size: one line, the same as replay's."""
    write_run(tmp_path / "good")
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "trajectory.json").write_text('{"run_id": "n", "task": ' + deep + "}")
    traj = write_run(tmp_path / "big-nested", steps=2, output_chars=300_000)  # read from its ends, the head nested
    text = traj.to_json().replace('"task": {', '"task": {"deep": ' + deep + ", ", 1)
    (tmp_path / "big-nested" / "trajectory.json").write_text(text)
    traj = write_run(tmp_path / "arguments")
    traj.steps[0].tool_calls[0].arguments = deep
    traj.save(tmp_path / "arguments" / "trajectory.json")
    (tmp_path / "dense").mkdir()  # 24 MiB of step records of two fields: ~1.4 GB once loaded
    (tmp_path / "dense" / "trajectory.json").write_text(
        '{"run_id": "d", "steps": [' + ",".join(['{"index":1,"started_at":0}'] * 900_000) + "]}")
    index = Index(tmp_path, min_interval_s=0).scan()
    by_rel = {r.rel: r for r in index.runs}
    for rel in ("nested", "big-nested"):
        assert by_rel[rel].exit_reason == "unreadable" and "nested more than 200 levels" in by_rel[rel].error, rel
    client = TestClient(make_app(tmp_path), base_url="http://127.0.0.1")
    assert client.get("/").status_code == 200
    for rel, says in (("nested", "nested more than 200 levels"), ("big-nested", "nested more than 200 levels"),
                      ("dense", "too many small values")):
        page = client.get(f"/r/{folder_id(rel)}")
        assert page.status_code == 422 and says in page.text, rel
    page = client.get(f"/r/{folder_id('arguments')}")  # the arguments are shown as the text they are
    assert page.status_code == 200 and "[[[[[[" in page.text
