"""Task rows -> verl's parquet, read back by verl's own dataset (RLHFDataset, collate_fn, DataProto)
with the embedded model's real tokenizer; the conversion command through recipes/verl/run.sh."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from insandbox.models.local_server import default_gguf
from insandbox.rl.rollout.runner import RolloutConfig, Rollouts
from insandbox.rl.schema import TaskRow
from insandbox.rl.trainers.verl_agent_loop import task_row
from insandbox.rl.trainers.verl_cpu_server import export_gguf_as_hf
from insandbox.rl.trainers.verl_data import AGENT_NAME, TASK_COLUMN, prompt_lengths, verl_rows, write_parquet

ROOT = Path(__file__).resolve().parents[3]
TASKS = [
    {"id": "sky", "problem_statement": "What colour is the sky? The material is in /testbed/documents. Write the "
                                       "answer to /testbed/answer.txt.", "ground_truth": "blue",
     "input_files": {"doc_1.txt": "The sky is blue.", "doc_2.txt": "Grass is green."}, "domain": "encyclopedia",
     "qa_type": "open", "source": "qed", "aliases": ["light blue"]},
    {"id": "city", "problem_statement": "Which city is named? Options: A. Paris B. Rome. Write the letter to "
                                        "/testbed/answer.txt.", "ground_truth": "A",
     "input_files": {"notes/a.md": "We went to Paris."}, "domain": "fiction", "qa_type": "single-choice",
     "source": "race", "options": ["A", "B"]},
    {"id": "long", "problem_statement": "Count the words. " + "word " * 400, "ground_truth": "400",
     "input_files": {}, "domain": "academic", "qa_type": "open", "answer_type": "number"},
]


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory) -> Path:
    """The embedded SmolLM2 as the Hugging Face folder verl loads its tokenizer from."""
    folder = tmp_path_factory.getbasetemp() / "smollm2-hf"
    if not (folder / "config.json").is_file():
        export_gguf_as_hf(default_gguf(), folder)
    return folder


@pytest.fixture(scope="module")
def data_config(tmp_path_factory):
    from omegaconf import OmegaConf

    return OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 4096, "filter_overlong_prompts": True,
                             "return_raw_chat": True, "truncation": "error", "filter_overlong_prompts_workers": 1,
                             "cache_dir": str(tmp_path_factory.mktemp("verl-cache"))})


def test_rows_read_back_through_verls_dataset(tmp_path, hf_model, data_config):
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
    from verl.utils.tokenizer import hf_tokenizer

    rows = verl_rows(TASKS, split="train")
    write_parquet(rows, tmp_path / "train.parquet")
    dataset = RLHFDataset(str(tmp_path / "train.parquet"), hf_tokenizer(str(hf_model)), data_config)
    assert len(dataset) == len(TASKS)
    prompts = RolloutConfig().prompts()
    for i, task in enumerate(TASKS):
        item = dataset[i]
        assert item["agent_name"] == AGENT_NAME
        assert item["raw_prompt"] == prompts.sandbox_messages(task["problem_statement"])
        assert item["data_source"] == f"insandbox/{task.get('source') or task['domain']}"
        assert item["reward_model"] == {"style": "rule", "ground_truth": task["ground_truth"]}
        assert item["index"] == i and item["extra_info"]["task_id"] == task["id"]
        # every row keeps its own files (a parquet struct would have merged the names of all rows)
        assert task_row(item) == TaskRow(**task).as_record()
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    assert [json.loads(t)["id"] for t in batch.non_tensor_batch[TASK_COLUMN]] == [t["id"] for t in TASKS]
    assert list(batch.non_tensor_batch["agent_name"]) == [AGENT_NAME] * len(TASKS)


def test_prompt_lengths_are_the_agent_loops(hf_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(hf_model)
    rows = verl_rows(TASKS)
    chat = Rollouts(tokenizer, RolloutConfig(), reward_fn=_unused_reward).chat
    expected = [len(chat.prompt_ids(chat_messages)) for chat_messages in (r["prompt"] for r in rows)]
    assert prompt_lengths(rows, tokenizer) == expected
    assert expected[2] > expected[0] + 300  # the long task really is longer


def test_run_sh_data_splits_and_drops_long_prompts(tmp_path, hf_model):
    from transformers import AutoTokenizer

    lengths = prompt_lengths(verl_rows(TASKS), AutoTokenizer.from_pretrained(hf_model))
    limit = max(lengths[0], lengths[1])  # the long task is over it
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS), encoding="utf-8")
    env = {**os.environ, "MODEL": str(hf_model), "INSANDBOX_VERL_DATA": str(tmp_path / "verl"), "VAL_SIZE": "1",
           "MAX_PROMPT_LENGTH": str(limit), "PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(["bash", str(ROOT / "recipes/verl/run.sh"), "data", str(tasks)], env=env, cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout[done.stdout.index("{"):])
    import pyarrow.parquet as pq

    written = {split: pq.read_table(tmp_path / "verl" / f"{split}.parquet").to_pylist() for split in ("train", "val")}
    ids = {split: [r["extra_info"]["task_id"] for r in rs] for split, rs in written.items()}
    assert ids == {"train": ["sky"], "val": ["city"]}  # the seeded held-out sample (seed 0: the second row)
    assert summary["train"]["dropped_over_max_prompt_length"] == ["long"]
    assert summary["val"]["dropped_over_max_prompt_length"] == []
    assert all(r["extra_info"]["split"] == split for split, rs in written.items() for r in rs)


async def _unused_reward(row, outcome, config):
    raise AssertionError("no rollout here")
