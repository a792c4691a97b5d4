"""Run `insandbox run` end to end against the project's scripted model server.

No model weights or API key needed: the "model" replays examples/primes_script.json
over real HTTP, while the sandbox, tools and run folder are all real.

    .venv/bin/python examples/scripted_demo.py [extra insandbox run flags]
"""
import subprocess
import sys
from pathlib import Path

from insandbox.models.scripted_server import ScriptedServer

HERE = Path(__file__).parent
TASK = ("Write a Python script that prints the first 10 prime numbers, run it, and save the output to "
        "/testbed/output/primes.txt")

if __name__ == "__main__":
    with ScriptedServer(HERE / "primes_script.json") as server:
        exe = Path(sys.executable).parent / "insandbox"
        code = subprocess.call([str(exe), "run", TASK, "--model", "scripted-demo", "--base-url", server.url,
                                *sys.argv[1:]])
    sys.exit(code)
