"""Run and benchmark folders recorded by real short runs (real sandboxes, real HTTP to the scripted
model server), for the viewer's tests and benchmarks/viewer_screenshots.py."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

from insandbox.bench.runner import BenchConfig, run_bench
from insandbox.config import RunConfig
from insandbox.models.scripted_server import ScriptedServer
from insandbox.runs.session import arun

PLOT = ("python3 - <<'PY'\n"
        "import matplotlib\n"
        "matplotlib.use('Agg')\n"
        "import matplotlib.pyplot as plt, numpy as np\n"
        "x = np.linspace(0, 6.3, 200)\n"
        "plt.figure(figsize=(4, 3)); plt.plot(x, np.sin(x)); plt.title('sine')\n"
        "plt.savefig('/testbed/output/sine.png', dpi=80)\n"
        "PY\n"
        "ls -l /testbed/output")
PAGE = ("<!doctype html><html><head><title>A page</title></head><body>"
        "<h1 id='title'>Made in the sandbox</h1><p id='by-script'></p><img src='sine.png' width='200'>"
        "<script>document.getElementById('by-script').textContent = 'script ran';</script></body></html>")
RUN_SCRIPT = {"name": "scripted-plotter", "turns": [
    {"content": "I will draw the sine curve first.", "reasoning_content": "A plot needs matplotlib; it is there.",
     "tool": "execute_bash", "args": {"command": PLOT}},
    {"tool": "str_replace_editor", "args": {"command": "create", "path": "/testbed/output/page.html",
                                             "file_text": PAGE}},
    {"tool": "execute_bash", "args": {"command": "printf 'x,sin\\n0,0\\n1.57,1\\n' > /testbed/output/table.csv && "
                                                 "seq 1 3000 | tail -n 3 && echo 0.5 > /testbed/answer.txt"}},
    {"tool": "submit"}]}

ROWS = [{"id": "q1", "problem_statement": "q1 Which one?\nA. x\nB. y", "ground_truth": "A"},
        {"id": "q2", "problem_statement": "q2 Which one?\nA. x\nB. y", "ground_truth": "B"}]
BENCH_SCRIPT = {"name": "scripted-bench", "scripts": [
    {"match": "q1", "turns": [{"tool": "execute_bash", "args": {"command": "echo A > /testbed/answer.txt; echo q1"}},
                              {"tool": "submit"}],
     "llm_turns": [{"content": "Answer: A"}]},
    {"match": "q2", "turns": [{"tool": "execute_bash", "args": {"command": "echo A > /testbed/answer.txt; echo q2"}},
                              {"tool": "submit"}],
     "llm_turns": [{"content": "Answer: B"}]}]}


def record_run(out: Path, image: str) -> Path:
    """A run whose model draws a PNG with matplotlib, writes an HTML page and a CSV, and submits."""
    srv = ScriptedServer(RUN_SCRIPT).start()
    try:
        result = asyncio.run(arun("Plot a sine curve and make a web page of it.", RunConfig(
            model="scripted-plotter", base_url=srv.url, image=image, max_steps=6, output_dir=Path(out))))
    finally:
        srv.stop()
    return result.run_dir


def record_bench(out: Path, image: str) -> Path:
    """A two-item multiple-choice benchmark in both modes (sandbox gets q2 wrong, plain gets both right)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data = out.parent / f"{out.name}-rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    srv = ScriptedServer(BENCH_SCRIPT).start()
    try:
        result = asyncio.run(run_bench(BenchConfig(task="chem", data=data, mode="both", repeats=1, concurrency=2,
                                                   output_dir=out, run=RunConfig(model="scripted-bench",
                                                                                 base_url=srv.url, image=image,
                                                                                 max_steps=4))))
    finally:
        srv.stop()
    return result.run_dir


def record_bench_without_tool_calls(out: Path, image: str) -> Path:
    """The same two items in sandbox mode against a model that never calls a tool (a server whose chat
    template drops the tools looks like this)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data = out.parent / f"{out.name}-rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    srv = ScriptedServer({"name": "no-tools", "turns": [{"content": "The answer is A."}] * 3}).start()
    try:
        result = asyncio.run(run_bench(BenchConfig(task="chem", data=data, mode="sandbox", repeats=1, concurrency=2,
                                                   output_dir=out, run=RunConfig(model="no-tools", base_url=srv.url,
                                                                                 image=image, max_steps=2))))
    finally:
        srv.stop()
    data.unlink()
    return result.run_dir
