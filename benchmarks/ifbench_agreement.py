"""Does our instruct_follow scorer (if-verifiable, loose) agree with IFBench's own rules?

IFBench's repository ships model responses (data/sample_output.jsonl) and the verdicts
its own evaluation code gave them in loose mode (eval/eval_results_loose.jsonl). This
script scores the same responses with our scorer and counts agreement, instruction by
instruction and prompt by prompt, on all of them and on the rows of a dev set.

    .venv/bin/python benchmarks/ifbench_agreement.py --ifbench PATH \
        [--dev ../shared/data/bench/instruct_follow/dev.jsonl]

PATH is a checkout of github.com/allenai/IFBench, or its bare git directory. Point
NLTK_DATA at NLTK's punkt_tab and stopwords (../shared/data/nltk_data here); checks that
need data that is missing are counted as "not checked", not as disagreements.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import json
import subprocess
from pathlib import Path

from insandbox.bench.data import Row
from insandbox.bench.scorers import make_scorer


def read_jsonl(repo: Path, rel: str) -> list[dict]:
    if (repo / rel).is_file():
        text = (repo / rel).read_text(encoding="utf-8")
    else:  # a bare git directory
        text = subprocess.run(["git", "--git-dir", str(repo), "show", f"HEAD:{rel}"], capture_output=True,
                              text=True, check=True).stdout
    return [json.loads(line) for line in text.split("\n") if line.strip()]


async def main(repo: Path, dev: Path | None) -> None:
    # the repository's files differ in trailing whitespace around prompts: match on stripped text
    responses = {r["prompt"].strip(): r["response"] for r in read_jsonl(repo, "data/sample_output.jsonl")}
    official = read_jsonl(repo, "eval/eval_results_loose.jsonl")
    tests = {r["prompt"].strip(): r for r in read_jsonl(repo, "data/IFBench_test.jsonl")}
    dev_prompts = None
    if dev:
        dev_prompts = {json.loads(line)["problem_statement"].strip() for line in dev.read_text().split("\n")
                       if line.strip()}
    scorer = make_scorer("ifbench")
    print(f"{'scope':<8} {'prompts':>8} {'agree':>8} {'instructions':>13} {'agree':>8} {'not checked':>12} "
          f"{'unmatched':>10}")
    for scope in ("all", "dev") if dev_prompts else ("all",):
        c: collections.Counter = collections.Counter()
        disagreements = []
        for o in official:
            p = o["prompt"].strip()
            if scope == "dev" and p not in dev_prompts:
                continue
            t = tests.get(p)
            if t is None or p not in responses:  # one official record is malformed (swallowed lines)
                c["unmatched"] += 1
                continue
            row = Row(id=str(t["key"]), problem_statement=t["prompt"],
                      ground_truth=json.dumps({"instruction_id_list": t["instruction_id_list"], "kwargs": t["kwargs"]}))
            result = await scorer.score(responses[p], row)
            followed = result.detail.get("followed", {})
            c["not_checked"] += len(result.detail.get("could_not_check", {}))
            for iid, ok in zip(t["instruction_id_list"], o["follow_instruction_list"]):
                if iid in followed:
                    c["instr"] += 1
                    c["instr_agree"] += followed[iid] == ok
                    if followed[iid] != ok:
                        disagreements.append((t["key"], iid, followed[iid], ok))
            if result.score is not None:
                c["prompts"] += 1
                c["prompt_agree"] += (result.score == 1.0) == o["follow_all_instructions"]
        print(f"{scope:<8} {c['prompts']:>8} {c['prompt_agree']:>8} {c['instr']:>13} {c['instr_agree']:>8} "
              f"{c['not_checked']:>12} {c['unmatched']:>10}")
        for d in disagreements[:10]:
            print("   disagreement: key", d[0], d[1], "ours", d[2], "IFBench", d[3])


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ifbench", type=Path, required=True)
    ap.add_argument("--dev", type=Path, default=None)
    a = ap.parse_args()
    asyncio.run(main(a.ifbench, a.dev))
