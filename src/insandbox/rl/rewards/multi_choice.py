"""Multi-choice answers: the set of letters stated, compared with the gold set (exact, or set F1).

The answer part (answer_part.py: thinking dropped, last \\boxed{}, "Answer:" label) must be letters
and nothing else, in one of these shapes:
- a list: "A, C", "A,C", "C and A" (or "and" in another language: "A und C", "A et C", "A и C",
  "A 和 C"), "A; C", "A/C", "(A) (C)", "**A**, **C**", "\\{A, C\\}", "$A, C$", one letter per line;
  lower-case letters count here ("a, c");
- option lines, each starting with its letter: "A. Paris\\nC. Lyon";
- a run of upper-case letters and nothing else: "AC", "ACD" (how many exams write them);
- one box per letter: "\\boxed{A}, \\boxed{C}".
Anything else states no set and scores 0 ("A and maybe C", "A, C are wrong"). A letter outside
the options is a wrong letter, never dropped. A letter written twice counts once (recorded in
`detail`).

Set F1 (`multi_choice="f1"`) gives partial credit only for a subset of the right letters: any wrong
letter scores 0. Plain set F1 paid for hedging (every option of five, two right: 0.57, more than an
honest wrong answer's 0); here selecting everything scores 0, and an honest partial answer ("A" of
"A,C": 0.67) always beats it.
"""
from __future__ import annotations

import re
from typing import Optional

from insandbox.bench.scorers import strip_thinking

from .answer_part import AnswerPart, answer_part, clip
from .characters import clean
from .hedges import CONNECTIVE_CLASS
from .options import check_gold_among_options, gold_letters, row_options
from .verdict import Verdict

_OPTION_LINE = re.compile(r"[(\[]?([A-Z])[).:\]](?:\s+\S.*)?")
# brackets, quotes and emphasis around letters; LaTeX's escaped braces, delimiters and math dollars
_MARKUP = re.compile(r"""\\(?:left|right|[bB]igg?[lr]?)(?![A-Za-z])|\\[{}()\[\]]|[()\[\]{}"'“”‘’«»*_`$]""")
# "and" in any language the open answers know, except the one-letter Latin words ("y", "e", "i"): letters here
_AND = sorted((w for w, kind in CONNECTIVE_CLASS.items() if kind == "and" and not (len(w) == 1 and w.isascii())),
              key=len, reverse=True)
_SEPARATORS = re.compile(r"(?:[\s,;/&+|，、；]|(?<!\w)(?:" + "|".join(map(re.escape, _AND)) + r")(?!\w))+", re.I)
_LETTER = re.compile(r"([A-Za-z])[.:)]?")
_RUN = re.compile(r"[A-Z]{2,26}\.?")
_BOX = re.compile(r"\\boxed\{([^{}]*)\}")


def _boxes_only(text: str) -> Optional[str]:
    """"\\boxed{A}, \\boxed{C}": one box per letter; their contents joined (None: not that shape)."""
    boxes = _BOX.findall(text)
    rest = _BOX.sub(" ", text)
    if len(boxes) > 1 and not _SEPARATORS.sub("", rest).strip():
        return ", ".join(boxes)
    return None


def read_letters(text: str) -> tuple[Optional[list[str]], str]:
    """(the letters as stated, in order, repeats kept; None when the text is not just letters), shape."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return None, "empty"
    tokens = [t for t in _SEPARATORS.split(_MARKUP.sub(" ", text)) if t]
    if tokens and all(_LETTER.fullmatch(t) for t in tokens):
        return [_LETTER.fullmatch(t).group(1).upper() for t in tokens], "letter list"
    if all(_OPTION_LINE.fullmatch(ln) for ln in lines):
        return [_OPTION_LINE.fullmatch(ln).group(1) for ln in lines], "option lines"
    if len(tokens) == 1 and _RUN.fullmatch(tokens[0]):
        return list(tokens[0].rstrip(".")), "run of letters"
    return None, "not a list of letters"


def set_f1(predicted: set[str], gold: set[str]) -> tuple[float, float, float]:
    """(F1, precision, recall) of two letter sets; an empty prediction scores 0."""
    hits = len(predicted & gold)
    if not hits:
        return 0.0, 0.0, 0.0
    precision, recall = hits / len(predicted), hits / len(gold)
    return 2 * precision * recall / (precision + recall), precision, recall


def score_multi_choice(answer: str, ground_truth: object, options: object, problem_statement: str,
                       mode: str) -> Verdict:
    gold = gold_letters(ground_truth)
    allowed = check_gold_among_options(gold, row_options(options, problem_statement))
    answer = clean(answer)
    part = answer_part(answer)
    boxes = _boxes_only(strip_thinking(answer))
    if boxes is not None:
        part = AnswerPart(boxes, "boxed, one box per letter")
    stated, shape = read_letters(part.text)
    detail = {"method": "letter-set F1" if mode == "f1" else "exact letter set", "answer_from": part.source,
              "answer_part": clip(part.text), "read_as": shape, "gold": gold, "options": allowed.letters,
              "options_from": allowed.source}
    if not stated:
        return Verdict(0.0, {**detail, "extracted": [], "why": "no answer" if not part.text else shape})
    predicted = sorted(set(stated))
    detail["extracted"] = predicted
    repeated = sorted({x for x in stated if stated.count(x) > 1})
    if repeated:
        detail["repeated"] = repeated
    outside = [x for x in predicted if x not in allowed.letters]
    if outside:
        detail["outside_options"] = outside
    if mode == "f1":
        f1, precision, recall = set_f1(set(predicted), set(gold))
        wrong = sorted(set(predicted) - set(gold))
        if wrong:  # hedging: partial credit is for a subset of the right set, never a superset
            return Verdict(0.0, {**detail, "f1": f1, "precision": precision, "recall": recall, "wrong": wrong,
                                 "why": "a wrong letter: partial credit only for a subset of the right letters"})
        return Verdict(f1, {**detail, "f1": f1, "precision": precision, "recall": recall})
    return Verdict(1.0 if predicted == gold else 0.0, detail)
