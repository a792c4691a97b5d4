"""Replay and fork of recorded runs.

- replayer.py: `insandbox replay RUN_DIR`: the recorded tool calls again in a fresh sandbox,
  each observation compared with the recorded one.
- fork.py: `insandbox fork RUN_DIR --step K --n N`: replay steps 1..K, snapshot the sandbox,
  and let N branches continue the conversation from there, each in its own sandbox.
- inputs.py: what a run records of its input files so that both can start from them again.
- report.py: the replay report on the console and as JSON.

Kept light: the runner imports inputs.py on every run.
"""
