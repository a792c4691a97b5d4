"""Single-choice answers: the benchmark's strict choice letter, limited to the row's options.

Strict as in bench/scorers/choice.py: thinking dropped, the last explicit statement wins ("Answer: C",
"the answer is (C)", "\\boxed{C}"), a reply naming several letters or a letter outside the options
chose nothing, a letter glued to other characters is no letter.
"""
from __future__ import annotations

from insandbox.bench.scorers.choice import read_choice

from .answer_part import clip
from .options import check_gold_among_options, gold_letters, row_options
from .verdict import Verdict


def score_single_choice(answer: str, ground_truth: object, options: object, problem_statement: str) -> Verdict:
    gold = gold_letters(ground_truth)
    if len(gold) != 1:
        raise ValueError(f"a single-choice ground truth is one letter, got {ground_truth!r:.80}")
    allowed = check_gold_among_options(gold, row_options(options, problem_statement))
    reading = read_choice(answer, allowed.letters)
    detail = {"method": "choice letter, strict extraction", "extracted": reading.letter, "gold": gold[0],
              "options": allowed.letters, "options_from": allowed.source, "answer": clip(answer)}
    if reading.why:
        detail["why"] = reading.why
    if len(set(reading.stated)) > 1:
        detail["stated"] = reading.stated  # the reply changed its mind: audit what it said before
    return Verdict(1.0 if reading.letter == gold[0] else 0.0, detail)
