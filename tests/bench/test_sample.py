"""The SampleRunner seam used directly, without the scheduler: one sample at a time to its typed record
(retries, a cut-off earlier attempt, scoring), in the sample's folder under the benchmark folder."""
from __future__ import annotations

import json

from insandbox import Trajectory
from insandbox.bench.data import Row
from insandbox.bench.sample import FailedAttempt, SampleRecord, SampleRunner
from insandbox.bench.scorers import make_scorer
from insandbox.bench.tasks import load_task
from insandbox.core.episode import ExitReason
from insandbox.runs import layout
from insandbox.runs.session import PoolSettings, Session, settings

ROW = Row(id="q 1/odd", problem_statement="Which one?\nA. yes\nB. no", ground_truth="A")


def _runner(srv, tmp_path, **run) -> SampleRunner:
    task = load_task("chem")
    session = Session(settings(None, {"model": "m", "base_url": srv.url, "max_retries": 0, **run}),
                      prompts=task.prompts())
    return SampleRunner(session, task, make_scorer(task.scorer, task.offline_scorer, None), tmp_path, retries=1,
                        retry_backoff_s=0)


def test_a_sample_is_tried_again_scored_and_recorded(scripted, run_async, tmp_path):
    srv = scripted({"llm_turns": [{"content": "Answer: A", "fail": {"status": 503, "times": 1}}]})
    runner = _runner(srv, tmp_path)

    async def scenario() -> SampleRecord:
        await runner.session.open(sandbox=False)
        try:
            return await runner.run(ROW, 0, "llm")
        finally:
            await runner.close()

    rec = run_async(scenario())
    assert (rec.score, rec.error, rec.exit_reason, rec.attempts) == (1.0, None, ExitReason.COMPLETED, 2)
    assert [f.attempt for f in rec.failed_attempts] == [1] and "model_error" in rec.failed_attempts[0].error
    assert rec.verdict.answer == "Answer: A" and rec.figures.steps == 1 and rec.engine_gone is None
    assert rec.trajectory == str(layout.sample_dir(ROW.id, "llm", 0) / layout.TRAJECTORY) == \
        "samples/llm/q_1_odd/r0/trajectory.json"
    assert Trajectory.load(tmp_path / rec.trajectory).answer == "Answer: A"
    line = json.loads(json.dumps(rec.as_dict()))  # results.jsonl's line
    assert line["failed_attempts"] == [FailedAttempt(1, rec.failed_attempts[0].error).as_dict()]
    assert (line["id"], line["mode"], line["score"], line["exit_reason"], line["answer"]) == \
        (ROW.id, "llm", 1.0, "completed", "Answer: A")
    assert "resumed_attempts" not in line and "node" not in line


def test_a_sandbox_sample_cut_off_earlier_and_failing_for_good_is_an_error(scripted, run_async, tmp_path,
                                                                          docker_image):
    """The model server fails every try: the sample is recorded as an error after its retry, apart from a
    wrong answer; an attempt of an earlier session that was cut off counts. Its sandbox came from the
    session's pool."""
    srv = scripted({"turns": [{"tool": "submit", "fail": {"status": 500, "times": 99}}]})
    runner = _runner(srv, tmp_path, image=docker_image)

    async def scenario() -> SampleRecord:
        await runner.session.open(sandbox=True, pool=PoolSettings(size=1))
        try:
            return await runner.run(ROW, 2, "sandbox", cut_off=True)
        finally:
            await runner.close()

    rec = run_async(scenario())
    assert rec.score is None and rec.verdict is None and "model_error" in rec.error
    assert (rec.attempts, rec.resumed_attempts, len(rec.failed_attempts)) == (3, 1, 2)
    line = rec.as_dict()
    assert line["cut_off_earlier"] is True and line["exit_reason"] == ExitReason.MODEL_ERROR
    assert (tmp_path / "samples" / "sandbox" / "q_1_odd" / "r2" / layout.TRAJECTORY).is_file()
