"""Task rows (the JSONL of `insandbox rl build-data`, a save_to_disk folder, or a hub dataset such as
hf:daixuancheng/llm-in-sandbox-rl:instruct_pretrain:train) as verl's dataset: one parquet row per task.

    python -m insandbox.rl.trainers.verl_data --data tasks/tasks.jsonl --out data/verl --val-size 64 \\
        --tokenizer Qwen/Qwen3-4B-Instruct-2507 --max-prompt-length 8192       # train.parquet, val.parquet

Columns (verl's conventions where it has them):

    data_source     "insandbox/<source or domain>"       verl groups validation metrics by it
    prompt          [system, user] messages               what the agent loop renders (tools aside); verl
                                                          filters on its length and logs it as raw_prompt
    agent_name      "insandbox"                           selects InSandboxAgentLoop
    insandbox_task  the task row as JSON                  the one source the agent loop reads (documents
                                                          included: a JSON string keeps every row's file
                                                          names its own, where a parquet struct would merge them)
    reward_model    {"style": "rule", "ground_truth"}     shown in verl's rollout dumps
    extra_info      {"index", "split", "task_id", "qa_type", "domain", "source"}

With --tokenizer, each prompt is measured exactly as the agent loop will build it (the model's chat
template, the tool schemas included) and rows longer than --max-prompt-length are dropped and listed:
the agent loop refuses such rows rather than cut the system prompt.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..schema import TaskRow, read_task_rows

AGENT_NAME = "insandbox"  # the name InSandboxAgentLoop is registered under
TASK_COLUMN = "insandbox_task"  # the task row as JSON


def verl_rows(rows: list[dict], split: str = "train", prompt_config: Optional[Path] = None) -> list[dict[str, Any]]:
    """verl dataset rows for task rows (validated against TaskRow)."""
    from ..rollout.runner import RolloutConfig

    prompts = RolloutConfig(prompt_config=prompt_config).prompts()
    out = []
    for i, raw in enumerate(rows):
        task = TaskRow(**raw)
        record = task.as_record()
        out.append({
            "data_source": f"insandbox/{task.source or task.domain or 'tasks'}",
            "prompt": prompts.sandbox_messages(task.problem_statement),
            "agent_name": AGENT_NAME,
            TASK_COLUMN: json.dumps(record, ensure_ascii=False),
            "reward_model": {"style": "rule", "ground_truth": task.ground_truth},
            "extra_info": {"index": i, "split": split, "task_id": task.id, "qa_type": task.qa_type,
                           "domain": task.domain, "source": task.source},
        })
    return out


def prompt_lengths(rows: list[dict[str, Any]], tokenizer: Any, template_kwargs: Optional[dict] = None,
                   prompt_config: Optional[Path] = None) -> list[int]:
    """Each row's prompt in tokens, as the agent loop builds it (same chat format, same tools)."""
    from ..rollout.runner import RolloutConfig, Rollouts

    config = RolloutConfig(prompt_config=prompt_config, template_kwargs=template_kwargs or {})
    chat = Rollouts(tokenizer, config, reward_fn=_no_reward).chat
    return [len(chat.prompt_ids(row["prompt"])) for row in rows]


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def verl_data(
    data: Annotated[str, typer.Option(help="Task rows: a JSONL (the tasks.jsonl of `insandbox rl build-data`), a "
                                           "save_to_disk folder (FOLDER[:SPLIT]) or hf:NAME[:CONFIG[:SPLIT]] "
                                           "(split: train).", metavar="ROWS")],
    out: Annotated[Path, typer.Option(help="Output folder: train.parquet (and val.parquet with --val-size).")],
    val_size: Annotated[int, typer.Option(help="Tasks held out for validation (a seeded sample).")] = 0,
    seed: Annotated[int, typer.Option(help="Seed of the validation sample.")] = 0,
    tokenizer: Annotated[Optional[str], typer.Option(help="The policy's tokenizer (folder or hub name): measure "
                                                          "prompts and drop those over --max-prompt-length.")] = None,
    max_prompt_length: Annotated[Optional[int], typer.Option(help="verl's data.max_prompt_length.")] = None,
    template_kwargs: Annotated[Optional[str], typer.Option(help="Chat-template kwargs as JSON, as verl's "
                                                               "data.apply_chat_template_kwargs.")] = None,
    limit: Annotated[Optional[int], typer.Option(help="Only the first N rows.")] = None,
) -> None:
    """Convert task rows to verl's parquet (agent_name "insandbox")."""
    if max_prompt_length is not None and tokenizer is None:
        raise typer.BadParameter("--max-prompt-length needs --tokenizer")
    from ...core.data_source import DataError

    try:
        rows = read_task_rows(data, limit, command="rl verl-data")
    except DataError as e:  # one line, as the other commands say it
        typer.echo(f"insandbox: --data {e}", err=True)
        raise typer.Exit(2) from None
    if val_size < 0 or val_size >= len(rows):
        raise typer.BadParameter(f"--val-size {val_size}: must leave training rows of the {len(rows)}")
    held = set(random.Random(seed).sample(range(len(rows)), val_size))
    splits = {"train": verl_rows([r for i, r in enumerate(rows) if i not in held], split="train")}
    if held:
        splits["val"] = verl_rows([r for i, r in enumerate(rows) if i in held], split="val")
    policy_tokenizer = None
    if tokenizer is not None:
        from transformers import AutoTokenizer

        policy_tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    summary: dict[str, Any] = {}
    for split, converted in splits.items():
        summary[split] = {"rows": len(converted)}
        if policy_tokenizer is not None:
            lengths = prompt_lengths(converted, policy_tokenizer, json.loads(template_kwargs or "{}"))
            summary[split]["prompt_tokens"] = {"min": min(lengths), "max": max(lengths)}
            if max_prompt_length is not None:
                summary[split]["dropped_over_max_prompt_length"] = [
                    r["extra_info"]["task_id"] for r, n in zip(converted, lengths) if n > max_prompt_length]
                converted = [r for r, n in zip(converted, lengths) if n <= max_prompt_length]
        if not converted:
            raise typer.BadParameter(f"no {split} rows left to write")
        write_parquet(converted, out / f"{split}.parquet")
        summary[split].update(written=len(converted), path=str(out / f"{split}.parquet"))
    typer.echo(json.dumps(summary, indent=1))


async def _no_reward(row: dict, outcome: Any, config: Any) -> Any:
    raise RuntimeError("measuring prompts scores nothing")


if __name__ == "__main__":
    typer.run(verl_data)
