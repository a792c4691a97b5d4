"""The case studies under examples/: each is complete, its recorded run is a real, finished run of
its own script, and the files it produced are what their names say. One test re-records an example
in the real sandbox."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import subprocess
import sys
import wave
import xml.etree.ElementTree as ET

import pytest

from insandbox import ExitReason, Trajectory
from insandbox.models.scripted_server import load_script
from tests.helpers import REPO

EXAMPLES = REPO / "examples"
# each example's produced files and what each must be
PRODUCED = {
    "travel_map": {"map.html": "html", "itinerary.csv": "csv"},
    "poster": {"poster.svg": "svg", "poster.png": "png"},
    "video": {"explainer.mp4": "mp4", "thumbnail.png": "png"},
    "music": {"theme.wav": "wav", "theme.mid": "midi", "notes.md": "text"},
    "chemistry": {"molar_masses.csv": "csv", "titration.png": "png", "report.md": "text"},
    "long_doc_qa": {"evidence.md": "text"},
}
TOOLS = {"execute_bash", "str_replace_editor", "submit"}


def _record_module():
    spec = importlib.util.spec_from_file_location("examples_record", EXAMPLES / "record.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_kind(path, kind):
    """Assert the file at `path` is a `kind` file, by its own structure rather than its name."""
    data = path.read_bytes()
    if kind == "png":
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", path
    elif kind == "svg":
        assert ET.fromstring(data).tag == "{http://www.w3.org/2000/svg}svg", path
    elif kind == "mp4":
        assert data[4:8] == b"ftyp" and b"moov" in data and b"avc1" in data, path  # H.264 in an MP4 container
    elif kind == "wav":
        assert data[:4] == b"RIFF" and data[8:12] == b"WAVE", path
        with wave.open(str(path)) as w:
            assert w.getnframes() / w.getframerate() > 1
    elif kind == "midi":
        assert data[:4] == b"MThd" and data[14:18] == b"MTrk", path
    elif kind == "html":
        text = data.decode()
        assert text.lstrip().lower().startswith("<!doctype html>") and "<svg" in text and "</html>" in text
        assert not re.search(r"(?:src|href)=|url\(|@import", text), "the map must load nothing from outside"
    elif kind == "csv":
        lines = data.decode().splitlines()
        assert len(lines) > 1 and all(line.count(",") >= lines[0].count(",") for line in lines), path
    else:
        assert data.decode().strip(), path


def test_the_recorder_knows_exactly_the_six_case_studies():
    assert _record_module().example_names() == sorted(PRODUCED)


def test_the_recorder_refuses_an_unknown_example_in_one_line():
    r = subprocess.run([sys.executable, str(EXAMPLES / "record.py"), "no_such_example"], capture_output=True,
                       text=True, cwd=REPO)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("record.py: no such example: no_such_example") and r.stderr.count("\n") == 1


@pytest.mark.parametrize("name", sorted(PRODUCED))
def test_an_example_has_its_task_inputs_readme_and_script(name):
    folder = EXAMPLES / name
    assert (folder / "task.md").read_text().strip()
    assert [p for p in (folder / "inputs").iterdir() if p.is_file()]
    readme = (folder / "README.md").read_text()
    assert f"--query-file examples/{name}/task.md --input-dir examples/{name}/inputs" in readme
    assert f"insandbox view examples/{name}/recorded" in readme
    turns = load_script(folder / "scripted.yaml")[0]["turns"]
    assert len(turns) >= 5 and turns[-1]["tool"] == "submit"
    assert {t["tool"] for t in turns} <= TOOLS
    index = (EXAMPLES / "README.md").read_text()
    assert f"[{name}]({name}/)" in index


@pytest.mark.parametrize("name", sorted(PRODUCED))
def test_the_recorded_run_is_a_finished_run_of_the_examples_own_script(name):
    folder = EXAMPLES / name
    traj = Trajectory.load(folder / "recorded" / "trajectory.json")
    assert traj.exit_reason == ExitReason.SUBMITTED
    # the recording was made from these inputs and this script, as they are now
    assert traj.task["input_dir"] == f"examples/{name}/inputs"
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (folder / "inputs").iterdir()}
    assert traj.task["input_digests"] == digests
    calls = [c for step in traj.steps for c in step.tool_calls]
    turns = load_script(folder / "scripted.yaml")[0]["turns"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [(t["tool"], t.get("args", {})) for t in turns]
    # every command the script ran worked
    assert all(c.exit_code == 0 for c in calls if c.name == "execute_bash"), name
    assert (folder / "recorded" / "answer.txt").read_text() == traj.answer and traj.answer.strip()


@pytest.mark.parametrize("name", sorted(PRODUCED))
def test_the_recorded_files_are_what_their_names_say(name):
    run = EXAMPLES / name / "recorded"
    on_disk = sorted(p.name for p in (run / "files").iterdir())
    assert on_disk == sorted(PRODUCED[name]) == sorted(Trajectory.load(run / "trajectory.json").output_files)
    for filename, kind in PRODUCED[name].items():
        check_kind(run / "files" / filename, kind)
    assert sum(p.stat().st_size for p in run.rglob("*") if p.is_file()) < 1.5 * 2**20


def test_the_examples_stay_small():
    folders = [EXAMPLES / name for name in PRODUCED]
    assert sum(p.stat().st_size for f in folders for p in f.rglob("*") if p.is_file()) < 5 * 2**20
    mp4 = EXAMPLES / "video" / "recorded" / "files" / "explainer.mp4"
    assert mp4.stat().st_size < 500 * 2**10


def test_re_recording_music_in_the_sandbox_makes_the_same_files(docker_image, tmp_path):
    """End to end: the scripted model over HTTP, `insandbox run`, the real sandbox. The synthesiser and
    the MIDI writer are deterministic, so the new files equal the committed ones byte for byte."""
    run = _record_module().record("music", tmp_path / "music")
    traj = Trajectory.load(run / "trajectory.json")
    assert traj.exit_reason == ExitReason.SUBMITTED and traj.answer.strip() == "C major, 120 BPM, 10.0 s"
    for filename, kind in PRODUCED["music"].items():
        check_kind(run / "files" / filename, kind)
        assert (run / "files" / filename).read_bytes() == (EXAMPLES / "music" / "recorded" / "files" /
                                                           filename).read_bytes()
