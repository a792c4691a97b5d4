"""The embedded model on this machine: prompt and generation speed, start-up, the main job.

    .venv/bin/python benchmarks/bench_local_model.py [--gguf PATH] [--skip-run]

1. tokens/s of the model itself (llama.cpp, this machine's cores): prompt processing
   of ~1000 fresh tokens, and free generation of 128 tokens;
2. one tool-call request through the embedded HTTP server, cold and warm (prompt cache);
3. `insandbox run` with no model configured (the README's main job, --max-steps 10):
   time from the command to its first model request, and the whole command.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASK = ("Write a Python script that prints the first 10 prime numbers, run it, and save the output to "
        "/testbed/output/primes.txt")


def model_speed(gguf: Path) -> list[tuple[str, str]]:
    from llama_cpp import Llama

    from insandbox.models.local_server import LocalModel
    from insandbox.prompts import load_prompt_config
    from insandbox.tools import default_tools

    rows = []
    t = time.perf_counter()
    llm = Llama(model_path=str(gguf), n_ctx=4096, n_threads=os.cpu_count(), verbose=False)
    rows.append(("model load", f"{time.perf_counter() - t:.2f} s"))
    prompt_rates, gen_rates = [], []
    for i in range(3):
        text = f"Document {i}. " + " ".join(f"word{i}_{k}" for k in range(330))  # ~1000 tokens, no cache hits
        toks = llm.tokenize(text.encode())
        llm.reset()
        t = time.perf_counter()
        llm.eval(toks)
        prompt_rates.append(len(toks) / (time.perf_counter() - t))
        t = time.perf_counter()
        out = llm.create_completion("Once upon a time", max_tokens=128, temperature=0.8, seed=i)
        gen_rates.append(out["usage"]["completion_tokens"] / (time.perf_counter() - t))
    rows.append(("prompt processing (~1000 tokens)", f"{statistics.median(prompt_rates):,.0f} tokens/s"))
    rows.append(("generation (128 tokens)", f"{statistics.median(gen_rates):,.0f} tokens/s"))
    del llm

    model = LocalModel(gguf)
    tools = [t.schema() for t in default_tools()]
    msgs = load_prompt_config().sandbox_messages(TASK)
    for label in ("tool-call request, cold (system prompt + tools, ~1150 tokens)", "same request, warm (prompt cache)"):
        t = time.perf_counter()
        code, body = model.chat({"messages": msgs, "tools": tools})
        rows.append((label, f"{time.perf_counter() - t:.2f} s ({body['usage']['prompt_tokens']} prompt, "
                            f"{body['usage']['completion_tokens']} completion tokens)"))
    return rows


def main_job() -> list[tuple[str, str]]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("INSANDBOX_MODEL", "INSANDBOX_BASE_URL", "OPENAI_API_KEY", "INSANDBOX_API_KEY")}
    rows = []
    for i in range(3):
        out = Path(f"/tmp/insandbox-bench-main-{os.getpid()}-{i}")
        t0 = time.time()
        r = subprocess.run([str(ROOT / ".venv/bin/insandbox"), "run", TASK, "--max-steps", "10",
                            "--out", str(out),
                            "--json"], capture_output=True, text=True, env=env)
        wall = time.time() - t0
        traj = json.loads((out / "trajectory.json").read_text())
        ready = traj["config"].get("embedded_server", {}).get("ready_at") or 0
        first = max(traj["steps"][0]["started_at"], ready) - t0 if traj["steps"] else float("nan")
        rows.append((f"main job, run {i + 1}: command -> first model request sent", f"{first:.2f} s"))
        rows.append((f"main job, run {i + 1}: whole command ({traj['exit_reason']}, {len(traj['steps'])} steps)",
                     f"{wall:.1f} s (rc {r.returncode})"))
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, default=None)
    ap.add_argument("--skip-run", action="store_true")
    a = ap.parse_args()
    from insandbox.models.local_server import default_gguf

    rows = model_speed(a.gguf or default_gguf())
    if not a.skip_run:
        rows += main_job()
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  value\n{'-' * (width + 30)}")
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
