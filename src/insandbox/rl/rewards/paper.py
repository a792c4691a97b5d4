"""`scoring="paper"`: the reward the paper's own RL training used, beside the strict default.

LLM-in-Sandbox-RL trains on its `instruct_pretrain` tasks with this reward (the official code:
`llm_in_sandbox/benchmark/instruct_pretrain/reward.py` of github.com/llm-in-sandbox/llm-in-sandbox,
called from the verl reward of github.com/llm-in-sandbox/llm-in-sandbox-rl after the last \\boxed{}
is taken as the answer). Written here from its semantics, not copied:

- single-choice: 1 for the right letter, else 0. The letter is read by our strict reader (as the
  default does): the official reader falls back to the last lone capital letter of the text, so
  "A B C D" would be read as "D" and listing every letter would pay.
- multi-choice: F1 between the set of comma-separated items of the answer (stripped, upper-cased;
  an item that is not a right letter counts as a wrong one) and the set of right letters.
- open (text or number): 1 when math-verify finds the answer equal to the reference (gold read as
  LaTeX, the answer as an expression or LaTeX), else the ROUGE-L F1 of the answer against the
  reference (rouge-score, stemmed; its tokenizer keeps only ASCII letters and digits, so text in
  other scripts scores 0, as in the official code).

What is ours around it: the answer part is read as everywhere here (thinking dropped, the last
\\boxed{}, an "Answer:" label), the Unicode clean-up of normalise.clean comes first, the best
reference (ground truth or alias) counts, and values joined by a connective ("2 \\lor 3") never
pass the math-verify step. Otherwise it pays for hedging exactly as published (README, Rewards):
every option of five with two right scores 0.57, three open guesses with the right one among them
about 0.5; that is why it is not the default.
"""
from __future__ import annotations

from typing import Any

from .answer_part import CONNECTIVES, answer_part, clip
from .multi_choice import set_f1
from .options import gold_letters
from .single_choice import score_single_choice
from .verdict import Verdict

_ROUGE: Any = None


def _rouge_l(reference: str, prediction: str) -> float:
    global _ROUGE
    if _ROUGE is None:
        from rouge_score import rouge_scorer

        _ROUGE = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return float(_ROUGE.score(reference, prediction)["rougeL"].fmeasure)


def _math_equal(reference: str, prediction: str) -> bool:
    """The official first step: the boxed reference read as LaTeX, the boxed answer as an expression or LaTeX."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    gold = parse("\\boxed{" + reference + "}", extraction_config=[LatexExtractionConfig()], parsing_timeout=None)
    pred = parse("\\boxed{" + prediction + "}", extraction_config=[ExprExtractionConfig(), LatexExtractionConfig()],
                 parsing_timeout=None)
    return bool(gold and pred and verify(gold, pred, timeout_seconds=None))


def score_paper_multi_choice(answer: str, ground_truth: object) -> Verdict:
    gold = gold_letters(ground_truth)
    part = answer_part(answer)
    items = sorted({item.strip().upper() for item in part.text.split(",") if item.strip()})
    f1, precision, recall = set_f1(set(items), set(gold))
    return Verdict(f1, {"method": "paper: F1 of the comma-separated items", "answer_from": part.source,
                        "extracted": [clip(i, 40) for i in items[:26]], "gold": gold, "f1": f1,
                        "precision": precision, "recall": recall})


def score_paper_open(answer: str, references: list[str]) -> Verdict:
    part = answer_part(answer)
    detail: dict[str, Any] = {"method": "paper: math-verify, else ROUGE-L F1 (best reference)",
                              "answer_from": part.source, "extracted": clip(part.text),
                              "references": [clip(r) for r in references]}
    if not part.text:
        return Verdict(0.0, {**detail, "why": "no answer"})
    if CONNECTIVES.search(part.text) and "\\" in part.text:
        detail["math_verify"] = "skipped: values joined by a connective"
    else:
        for ref in references:
            if _math_equal(ref, part.text):
                return Verdict(1.0, {**detail, "matched": clip(ref), "matched_by": "math-verify"})
    scores = [(_rouge_l(ref, part.text), ref) for ref in references]
    best, ref = max(scores, key=lambda s: s[0])
    return Verdict(best, {**detail, "rouge_l": best, "best_reference": clip(ref), "matched_by": "ROUGE-L"})


def score_paper(fields: dict, answer: str, references: list[str]) -> Verdict:
    qa_type = fields.get("qa_type") or "open"
    if qa_type == "single-choice":
        return score_single_choice(answer, fields.get("ground_truth"), fields.get("options"),
                                   fields.get("problem_statement") or "")
    if qa_type == "multi-choice":
        return score_paper_multi_choice(answer, fields.get("ground_truth"))
    if qa_type == "open":
        return score_paper_open(answer, references)
    raise ValueError(f"unknown qa_type {qa_type!r:.40} (single-choice, multi-choice or open)")
