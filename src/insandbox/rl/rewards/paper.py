"""`scoring="paper"`: the reward the paper's own RL training used, beside the strict default.

LLM-in-Sandbox-RL trains on its `instruct_pretrain` tasks with this reward (the official code:
`llm_in_sandbox/benchmark/instruct_pretrain/reward.py` of github.com/llm-in-sandbox/llm-in-sandbox,
called by `compute_final_reward` of github.com/llm-in-sandbox/llm-in-sandbox-rl with the whole
answer file, stripped). Written here from its semantics, not copied. Case by case:

- a choice row whose ground truth is several letters: F1 between the set of comma-separated items
  of the whole answer (stripped, upper-cased; an item that is not a right letter counts as a
  wrong one) and the set of right letters;
- a choice row whose ground truth is one letter, single-choice or multi-choice alike: 1 for that
  letter, else 0 (the official code sends every choice row without a comma in its ground truth
  to its single-letter reader);
- an open row (text or number): 1 when math-verify finds the answer equal to the reference (the
  reference read as LaTeX; the answer's last \\boxed{}, or the whole answer without a complete
  one, read as an expression or LaTeX), else the ROUGE-L F1 of the whole answer against the
  reference (rouge-score, stemmed; its tokenizer keeps only ASCII letters and digits, so text in
  other scripts scores 0, as in the official code).

Where it deviates (docs/rl/rewards.md ('Scoring `paper`'); tests/rl/rewards/test_paper.py has a test for each):
1. the single letter is read by our strict reader (single_choice.py), which refuses a reply naming
   several letters or states none: the official reader falls back to the last lone capital letter,
   so "A B C" reads "C" there, "A, B" pays for gold B and "I think it is C" for C;
2. the answer and the references are cleaned first (characters.py: invisible characters,
   full-width forms, other scripts' digits, dashes before digits as minus, superscripts, vulgar
   fractions, digit groups, "İ");
3. the best reference counts (the ground truth or an alias; the official code has only the
   ground truth);
4. an answer that states several values ("2 \\lor 3", "2 ∨ 3", "2 | 3", "2 \\mid 3", "Lyon = Paris",
   "\\pm 3": values.py; "\\boxed{2} or \\boxed{3}") never reaches math-verify, which would read it as
   one of them (or take the last box) and pay 1; ROUGE-L scores it. A reference that itself
   states several values (a set) lifts this;
5. the row's qa_type decides the reader (single-choice, multi-choice, open); the official code
   reads "multiple choice" in the qa_type text and a comma in the ground truth (letters separated
   otherwise, "A;C", are one unmatchable string there), and routes by `domain` first (math and
   physics to math-verify alone, chem and biomed to its letter reader, instruct_follow to its
   checkers, any domain other than instruct_pretrain or long_context fails): the domain is not
   read here;
6. math-verify runs without its own timeouts, in a worker that `timeout_s` kills (error_value):
   the official code gives math-verify its own 5 s limits (then 0, then ROUGE-L) and the whole
   reward 60 s.
It pays for hedging exactly as published otherwise: every option of five with two right scores
0.57, three open guesses with the right one among them about 0.5; that is why it is not the default.
"""
from __future__ import annotations

from typing import Any

from .answer_part import clip, several_boxed
from .multi_choice import set_f1
from .options import gold_letters
from .single_choice import score_single_choice
from .values import several_values
from .verdict import Verdict

_ROUGE: Any = None
_BOX = "\\boxed{"


def _rouge_l(reference: str, prediction: str) -> float:
    global _ROUGE
    if _ROUGE is None:
        from rouge_score import rouge_scorer

        _ROUGE = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return float(_ROUGE.score(reference, prediction)["rougeL"].fmeasure)


def last_complete_box(text: str) -> str:
    """What the official math step reads: the content of the last \\boxed{ when its braces close,
    else the whole text (stripped). Unlike answer_part, an unclosed last box is not skipped."""
    start = text.rfind(_BOX)
    if start == -1:
        return text.strip()
    i, depth = start + len(_BOX), 1
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[start + len(_BOX):i - 1].strip() if depth == 0 else text.strip()


def _math_equal(reference: str, prediction: str) -> bool:
    """The official first step: the boxed reference read as LaTeX, the boxed answer as an expression or LaTeX."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    try:
        gold = parse(_BOX + reference + "}", extraction_config=[LatexExtractionConfig()], parsing_timeout=None)
        pred = parse(_BOX + prediction + "}", extraction_config=[ExprExtractionConfig(), LatexExtractionConfig()],
                     parsing_timeout=None)
        return bool(gold and pred and verify(gold, pred, timeout_seconds=None))
    except Exception:  # the official step scores a failure 0 and goes on to ROUGE-L
        return False


def score_paper_letters(answer: str, gold: list[str]) -> Verdict:
    items = sorted({item.strip().upper() for item in answer.strip().split(",") if item.strip()})
    f1, precision, recall = set_f1(set(items), set(gold))
    return Verdict(f1, {"method": "paper: F1 of the comma-separated items", "answer_from": "whole",
                        "extracted": [clip(i, 40) for i in items[:26]], "gold": gold, "f1": f1,
                        "precision": precision, "recall": recall})


def score_paper_open(answer: str, references: list[str]) -> Verdict:
    answer = answer.strip()
    compared = last_complete_box(answer)
    detail: dict[str, Any] = {"method": "paper: math-verify, else ROUGE-L F1 (best reference)", "answer_from": "whole",
                              "extracted": clip(compared), "references": [clip(r) for r in references]}
    if not answer:
        return Verdict(0.0, {**detail, "why": "no answer"})
    boxes = several_boxed(answer)
    several = f"several boxed answers: {', '.join(clip(b, 40) for b in boxes[:10])}" if boxes else \
        several_values(compared)
    if several and not any(several_values(ref) for ref in references):
        detail["math_verify"] = f"skipped: {several}"
    else:
        for ref in references:
            if _math_equal(ref, compared):
                return Verdict(1.0, {**detail, "matched": clip(ref), "matched_by": "math-verify"})
    scores = [(_rouge_l(ref, answer), ref) for ref in references]
    best, ref = max(scores, key=lambda s: s[0])
    return Verdict(best, {**detail, "rouge_l": best, "best_reference": clip(ref), "matched_by": "ROUGE-L"})


def score_paper(fields: dict, answer: str, references: list[str]) -> Verdict:
    qa_type = fields.get("qa_type") or "open"
    if qa_type in ("single-choice", "multi-choice"):
        gold = gold_letters(fields.get("ground_truth"))
        if len(gold) > 1:
            return score_paper_letters(answer, gold)
        verdict = score_single_choice(answer, gold[0], fields.get("options"), fields.get("problem_statement") or "")
        verdict.detail["method"] = "paper: one right letter, read by the strict choice reader"
        return verdict
    if qa_type == "open":
        return score_paper_open(answer, references)
    raise ValueError(f"unknown qa_type {qa_type!r:.40} (single-choice, multi-choice or open)")
