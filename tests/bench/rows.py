"""Development rows of the six tasks, and what a model that knows (or misses) the answer writes."""
from __future__ import annotations

from insandbox.bench.data import load_rows
from tests.helpers import shared_data

TASKS = ["math", "physics", "chem", "biomed", "long_context", "instruct_follow"]


IF_GOLD = {
    "ifbench_0": "A kaleidoscope of thought. " + "The nebula glows. " * 2 + "A whisper. " * 3
                 + "Into the labyrinth. " * 5 + "A paradox. " * 7,
    "ifbench_42": " ".join(["word"] * 59),
    "ifbench_6": "Ideas matter, and plans matter, but action matters most.",
    "ifbench_70": "Light is fast 🚀. Nothing with mass reaches it 🌌. Time slows near it ⏳.",
}


def dev_rows(task: str):
    return load_rows(shared_data() / "bench" / task / "dev.jsonl", None, None)


def gold_file(task: str, row) -> str:
    """What a model that knows the answer writes to answer.txt."""
    if task == "math":
        return "\\boxed{" + row.ground_truth + "}"
    if task == "instruct_follow":
        return IF_GOLD[row.id]
    return row.ground_truth


def gold_reply(task: str, row) -> str:
    """The same, as a plain-mode reply."""
    if task in ("math", "physics"):
        return "Working through it step by step, the result is " + gold_file(task, row) + "."
    if task in ("chem", "biomed"):
        return f"The options point one way.\nAnswer: {row.ground_truth}"
    return gold_file(task, row)


def wrong_answer(task: str, row) -> str:
    return {"math": "\\boxed{123456789}", "physics": "\\boxed{\\text{no idea}}",
            "chem": "Z", "biomed": "Z", "long_context": "xyzzy plugh",
            "instruct_follow": "no"}[task]
