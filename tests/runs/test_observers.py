"""What a session wires is declared, never probed: an observer's `on_delta` (a SessionObserver hook,
called with each piece of a streamed reply when `stream` is set) and the made client's `server` (the
embedded model's, recorded in the trajectory). Plain mode: no sandbox needed."""
from __future__ import annotations

import json

from insandbox import RunConfig, arun
from insandbox.bench.runner import BenchConfig, BenchProgress, run_bench
from insandbox.runs.session import RunObserver

REPLY = {"content": "The answer is 42, said in more than one piece.", "reasoning_content": "Think it over."}
NO_MODEL_ENV = ("INSANDBOX_MODEL", "INSANDBOX_BASE_URL", "OPENAI_API_KEY", "INSANDBOX_API_KEY")


class Pieces(RunObserver):
    def __init__(self):
        self.pieces: list[tuple[str, str]] = []
        self.ended = None

    def on_delta(self, kind: str, text: str) -> None:
        self.pieces.append((kind, text))

    def on_end(self, result) -> None:
        self.ended = result

    def text(self, kind: str) -> str:
        return "".join(t for k, t in self.pieces if k == kind)


def test_a_streamed_reply_reaches_the_observer_piece_by_piece(scripted, run_async, tmp_path):
    srv = scripted({"llm_turns": [REPLY, REPLY]})
    shown = Pieces()
    result = run_async(arun("Q?", model="m", base_url=srv.url, mode="llm", stream=True, observer=shown,
                            output_dir=tmp_path / "streamed"))
    assert shown.text("content") == REPLY["content"] and shown.text("reasoning") == REPLY["reasoning_content"]
    assert len(shown.pieces) > 2 and shown.ended is result
    assert result.trajectory.steps[0].time_to_first_token_s is not None  # it was streamed
    unstreamed = Pieces()
    run_async(arun("Q?", model="m", base_url=srv.url, mode="llm", observer=unstreamed, output_dir=tmp_path / "plain"))
    assert unstreamed.pieces == [] and unstreamed.ended is not None  # no stream, no pieces


def test_observers_that_show_no_stream_need_no_hook_of_their_own(scripted, run_async, tmp_path):
    """The base classes' hooks do nothing: a streamed run and a streamed benchmark go through them."""
    srv = scripted({"llm_turns": [{"content": "Answer: A"}]})
    result = run_async(arun("Q?", model="m", base_url=srv.url, mode="llm", stream=True, observer=RunObserver(),
                            output_dir=tmp_path / "run"))
    assert result.answer == "Answer: A" and result.trajectory.steps[0].time_to_first_token_s is not None
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"id": f"r{i}", "problem_statement": f"question {i}", "ground_truth": "A"})
                            + "\n" for i in range(2)))
    cfg = BenchConfig(task="chem", data=data, mode="llm", concurrency=2, output_dir=tmp_path / "bench",
                      run=RunConfig(model="m", base_url=srv.url, stream=True))
    progress = BenchProgress()
    bench = run_async(run_bench(cfg, progress))
    progress.close()
    assert [r["score"] for r in bench.records] == [1.0, 1.0]


def test_the_embedded_models_server_is_recorded_and_a_remote_one_is_not(scripted, run_async, tmp_path, monkeypatch):
    for name in NO_MODEL_ENV:
        monkeypatch.delenv(name, raising=False)
    local = run_async(arun("Say hello.", mode="llm", max_tokens=8, output_dir=tmp_path / "local"))
    config = local.trajectory.config
    assert config["base_url"] == "embedded" and config["gguf"].endswith(".gguf")
    server = config["embedded_server"]
    assert server["gguf"] == config["gguf"] and server["url"].startswith("http://127.0.0.1:")
    assert 0 < server["spawned_at"] <= server["ready_at"]
    srv = scripted({"llm_turns": [{"content": "hello"}]})
    remote = run_async(arun("Say hello.", model="m", base_url=srv.url, mode="llm", output_dir=tmp_path / "remote"))
    assert "embedded_server" not in remote.trajectory.config and remote.trajectory.config["gguf"] is None
