"""choice: the option letter a reply commits to, read strictly, compared with the gold letter.

Strict means no credit for a letter the reply did not choose:
- only the row's own option letters count (read from the question: "A. ..." lines or
  "(A) ... (B) ..." inline; a row field `options`/`choices` wins; none found: any of A-Z);
- a letter glued to other characters is no letter ("C1CC(O)..." is a SMILES string, not C);
- the choice is the last explicit statement of the reply (`Answer: C`, `the answer is (C)`,
  `**Answer:** C`, `"answer": "C"`, `\\boxed{C}`); without one, a reply that is just a letter,
  or whose first or last line alone starts with an option mark ("C. Ethanol");
- a statement naming several letters ("C and D") is no answer, and so is a reply listing
  several options.
Thinking (`<think>...</think>`) is dropped first. Every result also carries the verdict of the
reference implementation's lenient extraction (choice_reference.py), for the report.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from string import ascii_uppercase
from typing import Optional

from ..data import Row
from .base import ScoreResult, strip_thinking
from .reference_extraction import reference_verdict

# one letter, maybe wrapped in brackets, quotes or markdown emphasis: C, (C), [C], **C**, "C"
_TOKEN = r"[*_]{0,2}[\"'(\[]?[*_]{0,2}([A-Za-z])[*_]{0,2}[\"')\]]?[*_]{0,2}"
# what may follow a letter: nothing glued to it, at most punctuation before a space or the end
_UPPER_END = r"(?=[.,;:!?]*(?:\s|$))"
_LOWER_END = r"(?=[.,;:!?\"')\]}*_]*[ \t]*(?:\n|$))"  # "the answer is a molecule" is not option a
_SEP = r"\s*(?:,|/|&|\+|\band\b|\bor\b)\s*"
_LIST = _TOKEN + _UPPER_END + "(?:" + _SEP + _TOKEN + _UPPER_END + ")*"
_LETTER = re.compile(r"(?<![A-Za-z0-9\\])" + _TOKEN + _UPPER_END)  # one letter of a list

_STATEMENTS = [
    re.compile(r'"answer"\s*:\s*"\s*([A-Za-z])\s*"', re.I),
    re.compile(r"\b(?:final\s+|correct\s+|best\s+)?(?:answer|choice|option)\b[*_]{0,2}"
               r"(?:\s+is\b\s*:?|\s*[:：])[*_]{0,2}\s*(?:option\s+|choice\s+)?(" + _LIST + ")", re.I),
    re.compile(r"\b(?:options?|choices?)\s+(" + _LIST + r")\s+(?:is|are)\s+(?:the\s+)?(?:correct|right|best)\b", re.I),
]
_BOXED_WRAPPERS = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\{([^{}]*)\}")
_OPTION_LINE = re.compile(r"[*_]{0,2}[(\[]?([A-Z])[).:\]][*_]{0,2}(?:\s|$)")
# how questions write their options
_OPTIONS_AT_LINE_START = re.compile(r"^[ \t]*[(\[]?([A-Z])[).:\]][ \t]+\S", re.M)
_OPTIONS_INLINE = re.compile(r"(?:^|(?<=\s))\(([A-Z])\)[ \t]+\S", re.M)


def _longest_run_from_a(letters: list[str]) -> str:
    """The longest run A, B, C, ... in the order found (a stray "A." elsewhere restarts it)."""
    best, run = "", ""
    for letter in letters:
        if letter == "A":
            run = "A"
        elif run and ord(letter) == ord(run[-1]) + 1:
            run += letter
        else:
            run = ""
        if len(run) >= len(best):
            best = run
    return best if len(best) >= 2 else ""


def option_letters(row: Row) -> tuple[Optional[str], str]:
    """(the row's option letters, where they came from); None when no options were found."""
    given = row.extra.get("options", row.extra.get("choices"))
    if isinstance(given, dict) and given and all(str(k).upper() in ascii_uppercase for k in given):
        return "".join(sorted(str(k).upper() for k in given)), "row field"
    if isinstance(given, list) and 2 <= len(given) <= 26:
        return ascii_uppercase[:len(given)], "row field"
    text = row.problem_statement
    found = [_longest_run_from_a(p.findall(text)) for p in (_OPTIONS_AT_LINE_START, _OPTIONS_INLINE)]
    best = max(found, key=len)
    return (best, "question") if best else (None, "none found in the question")


@dataclass
class Reading:
    letter: Optional[str]  # the chosen letter, None: no answer
    why: str = ""  # why there is no answer
    stated: list[str] = field(default_factory=list)  # every letter the reply stated as its answer, in order


def _letters_in(span: str, after: str = "") -> list[str]:
    """The letters of a statement's answer part (followed in the reply by `after`), upper-cased,
    in order, without repeats."""
    out: list[str] = []
    for m in _LETTER.finditer(span):
        letter = m.group(1)
        if letter.islower() and not re.match(_LOWER_END, span[m.end():] + after):
            continue
        if letter.upper() not in out:
            out.append(letter.upper())
    return out


def _statements(text: str) -> list[tuple[int, list[str]]]:
    """(position, letters) of each explicit answer statement of the reply."""
    found = []
    for pattern in _STATEMENTS:
        for m in pattern.finditer(text):
            letters = _letters_in(m.group(1), text[m.end(1):])
            if letters:
                found.append((m.start(), letters))
    for m in re.finditer(r"\\boxed\{", text):
        i, depth = m.end(), 1
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth:
            continue
        content = _BOXED_WRAPPERS.sub(r"\1", text[m.end():i - 1]).strip()
        if re.fullmatch(_LIST, content):
            found.append((m.start(), _letters_in(content)))  # nothing follows inside the braces
    return sorted(found)


def read_choice(text: str, options: Optional[str] = None) -> Reading:
    """What letter the reply chose among `options` (None: any of A-Z), strictly."""
    text = strip_thinking(text)
    options = options or ascii_uppercase
    statements = _statements(text)
    stated = [letter for _, letters in statements for letter in letters]
    if statements:
        letters = statements[-1][1]  # a reply's conclusion is its last statement
    else:
        # no statement: a line that is only a letter ("C", "**C**") or starts with an option mark ("C. Ethanol")
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        marked = {}
        for i, line in enumerate(lines):
            if re.fullmatch(_LIST, line):
                marked[i] = _letters_in(line)
            elif _OPTION_LINE.match(line):
                marked[i] = [_OPTION_LINE.match(line).group(1)]
        if len({tuple(v) for v in marked.values()}) > 1:
            return Reading(None, "the reply lists several options", stated)
        ends = [i for i in marked if i in (0, len(lines) - 1)]
        if not ends:
            return Reading(None, "no choice letter found", stated)
        letters = marked[ends[-1]]
    if len(letters) > 1:
        return Reading(None, f"several letters chosen: {', '.join(letters)}", stated)
    if letters[0] not in options:
        return Reading(None, f"{letters[0]} is not one of the options {options[0]}-{options[-1]}", stated)
    return Reading(letters[0], "", stated)


def extract_choice(text: str, options: Optional[str] = None) -> Optional[str]:
    return read_choice(text, options).letter


def gold_letter(row: Row) -> str:
    gold = row.ground_truth.strip().upper()
    return gold if len(gold) == 1 else (extract_choice(row.ground_truth) or gold)


def strict_verdict(answer: str, row: Row) -> tuple[float, Reading, dict]:
    """(score, reading, detail) of the strict extraction."""
    options, source = option_letters(row)
    gold = gold_letter(row)
    detail = {"options": options or "A-Z", "options_from": source}
    if options and gold not in options:  # the question was misread; do not reject the right letter
        detail.update(options="A-Z", options_from=f"gold {gold} not among the options read ({options})")
        options = None
    reading = read_choice(answer or "", options)
    return (1.0 if reading.letter == gold else 0.0), reading, detail


def both_verdicts(answer: str, row: Row) -> dict:
    """The strict and the reference extraction's verdicts on one answer (score_detail["extractions"])."""
    score, reading, _ = strict_verdict(answer, row)
    ref_score, ref_letter = reference_verdict(answer, row.ground_truth)
    return {"strict": {"letter": reading.letter, "score": score},
            "reference": {"letter": ref_letter, "score": ref_score}}


class Choice:
    name = "choice"
    method = "choice letter, strict extraction"
    approximate = False

    async def score(self, answer: str, row: Row) -> ScoreResult:
        score, reading, detail = strict_verdict(answer, row)
        if reading.why:
            detail["why"] = reading.why
        if len(set(reading.stated)) > 1:
            detail["stated"] = reading.stated
        detail["extractions"] = both_verdicts(answer, row)
        return ScoreResult(score, reading.letter or "", self.method, detail)
