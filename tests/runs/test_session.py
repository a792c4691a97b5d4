"""The Session seam used directly: prepared once, many tasks run through it (at once, in both modes),
each in a run folder finished whatever happened; its admission settings are its own."""
from __future__ import annotations

import asyncio

from insandbox import Trajectory
from insandbox.runs import layout
from insandbox.runs.session import PoolSettings, Session, settings
from insandbox.sandbox import admission
from tests.helpers import containers_with_label

READ = {"turns": [{"tool": "execute_bash", "args": {"command": "cat /testbed/input/n.txt > /testbed/answer.txt; "
                                                              "cp /testbed/input/n.txt /testbed/output/copy.txt"}},
                  {"tool": "submit"}],
        "llm_turns": [{"content": "plain answer"}]}


class Lines:
    """A session's observer: its status lines."""

    def __init__(self):
        self.status: list[str] = []

    def on_status(self, text: str) -> None:
        self.status.append(text)

    def on_progress(self, text: str) -> None:
        pass


def test_one_session_runs_many_tasks_each_in_a_folder_of_its_own(scripted, run_async, tmp_path, docker_image):
    srv = scripted(READ)
    cfg = settings(None, {"model": "m", "base_url": srv.url, "image": docker_image, "max_steps": 5})
    session = Session(cfg)

    async def scenario():
        await session.open(sandbox=True, pool=PoolSettings(size=2, run_id="session-test"))
        try:
            runs = [session.run(session.task("Copy n.", f"t{i}", {"n.txt": str(i)}), tmp_path / f"r{i}")
                    for i in range(3)]
            sandboxed = await asyncio.gather(*runs)
            plain = await session.run(session.task("Say something."), tmp_path / "plain", mode="llm")
        finally:
            await session.close()
        return sandboxed, plain

    sandboxed, plain = run_async(scenario())
    for i, result in enumerate(sandboxed):
        folder = tmp_path / f"r{i}"
        assert result.run_dir == folder and result.answer.strip() == str(i) and result.files == ["copy.txt"]
        assert (folder / layout.ANSWER).read_text().strip() == str(i)
        assert (folder / layout.FILES / "copy.txt").read_text().strip() == str(i)
        t = Trajectory.load(folder / layout.TRAJECTORY)
        assert t.exit_reason == "submitted" and t.finished_at and t.totals.wall_time_s > 0
        assert (t.mode, t.config["output_dir"], t.config["model"]) == ("sandbox", str(folder), "m")
        assert t.task["id"] == f"t{i}" and t.task["input_files"] == ["n.txt"]
    assert plain.answer == "plain answer" and Trajectory.load(tmp_path / "plain" / layout.TRAJECTORY).mode == "llm"
    # the three sandbox runs took their sandboxes from the session's one pool, which is gone with it
    assert session.pool.stats.started + session.pool.stats.recycled >= 3
    assert not containers_with_label("insandbox.run_id=session-test")


def test_a_sessions_sandbox_cap_and_status_line_are_its_own(scripted, run_async, tmp_path, docker_image):
    """--max-sandboxes holds for the session's own sandboxes and its waits are said on its own status line;
    the process's gate is left as it was (another session beside it is not capped)."""
    srv = scripted(READ)
    gate = admission.gate()
    before = (gate.thresholds.max_sandboxes, list(gate._reporters))
    lines = Lines()
    capped = Session(settings(None, {"model": "m", "base_url": srv.url, "image": docker_image, "max_sandboxes": 1}),
                     lines)
    most = [0]

    async def watch() -> None:  # how many of the session's sandboxes are admitted, all along
        while True:
            most[0] = max(most[0], capped.admission.live)
            await asyncio.sleep(0.005)

    async def scenario():
        await capped.open(sandbox=True)
        watcher = asyncio.ensure_future(watch())
        try:
            return await asyncio.gather(*(capped.run(capped.task("Copy n.", f"c{i}", {"n.txt": str(i)}),
                                                     tmp_path / f"c{i}") for i in range(3)))
        finally:
            watcher.cancel()
            await capped.close()

    results = run_async(scenario())
    assert [r.answer.strip() for r in results] == ["0", "1", "2"]
    assert any(s.startswith("waiting for a sandbox to close: 1 live, --max-sandboxes 1") for s in lines.status)
    assert most[0] == 1 and capped.admission.live == 0
    assert (gate.thresholds.max_sandboxes, list(gate._reporters)) == before


def test_a_hostile_output_folder_leaves_a_small_trajectory(scripted, run_async, tmp_path, docker_image):
    """Regression: every entry left behind was recorded whole, so 30,000 long paths wrote a 118 MB
    trajectory.json. The record is now the first entries, clipped, and a count of the rest."""
    from insandbox import arun
    from insandbox.sandbox.copyback import SKIPPED_KEPT

    make = ("cd /testbed/output && mkdir $(seq -f d%04g 0 1999) && python3 -c \"import os\n"
            "for i in range(1000): os.symlink('/' + 't' * 3000, 'l%04d' % i + 'n' * 195)\"")
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": make}}, {"tool": "submit"}]})
    result = run_async(arun("fill the output folder", model="m", base_url=srv.url, output_dir=tmp_path,
                            image=docker_image))
    assert result.trajectory.exit_reason == "submitted", result.trajectory.exit_detail
    saved = Trajectory.load(tmp_path / layout.TRAJECTORY)
    assert len(saved.output_skipped) == SKIPPED_KEPT + 1 and saved.output_skipped[-1].path == "/testbed/output/..."
    assert "800 more" in saved.output_skipped[-1].reason
    assert (tmp_path / layout.TRAJECTORY).stat().st_size < 300_000
    assert len(list((tmp_path / layout.FILES).iterdir())) == 2000  # the empty folders, within the limit
