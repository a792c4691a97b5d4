"""The part of an answer file that states the answer, before any qa_type reads it.

In order: thinking (`<think>...</think>`) is dropped; the last `\\boxed{...}` wins when there is
one; otherwise the text after the last answer label ("Answer:", "Final answer:", "The answer is",
"The correct options are"); otherwise the whole text. The label must start a line, so words like
"answer" inside an answer are left alone.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from insandbox.bench.scorers import last_boxed, strip_thinking

from .hedges import without_connectives

# \text{A, C} inside a box is the text itself
_LATEX_TEXT = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_LABEL = re.compile(
    r"^[ \t>#*_]*(?:the\s+)?(?:final\s+|correct\s+|right\s+|best\s+)?(?:answers?|options?|choices?)[*_]{0,2}"
    r"(?:\s+(?:is|are)\b[ \t]*[:：]?|[ \t]*[:：])[*_]{0,2}[ \t]*", re.I | re.M)


@dataclass
class AnswerPart:
    text: str  # what the qa_type reads
    source: str  # "boxed", "label", "whole" or "empty" (only thinking, or nothing)


_COMMAND = re.compile(r"\\[A-Za-z]+")


def several_boxed(text: str) -> list[str]:
    """The contents of two or more \\boxed{} that differ and have nothing but separators, LaTeX
    commands or connectives of any language around them ("\\boxed{2} \\lor \\boxed{3}", "\\boxed{2},
    \\boxed{3}", "\\boxed{2} → \\boxed{3}"), or an "or" among other words ("\\boxed{2} or maybe
    \\boxed{3}"): alternatives, where the last box alone would win. [] for any other text (a reply
    that changed its mind: "\\boxed{2} is wrong; the answer is \\boxed{3}")."""
    text = strip_thinking(text)
    boxes, rest, start = [], [], 0
    while (at := text.find("\\boxed{", start)) != -1:
        i, depth = at + len("\\boxed{"), 1
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth:
            break
        rest.append(text[start:at])
        boxes.append(text[at + len("\\boxed{"):i - 1].strip())
        start = i
    rest.append(text[start:])
    outside, joined_by = without_connectives(_COMMAND.sub(" ", "".join(rest)))
    if len(set(boxes)) > 1 and (not any(ch.isalnum() for ch in outside) or "or" in joined_by):
        return boxes
    return []


def unwrap_latex_text(text: str) -> str:
    previous = None
    while previous != text:  # nested wrappers: \textbf{\text{C}}
        previous, text = text, _LATEX_TEXT.sub(r"\1", text)
    return text


def answer_part(answer: str) -> AnswerPart:
    text = strip_thinking(answer)
    if not text:
        return AnswerPart("", "empty")
    boxed = last_boxed(text)
    if boxed is not None:
        return AnswerPart(unwrap_latex_text(boxed).strip(), "boxed")
    labels = list(_LABEL.finditer(text))
    if labels:
        rest = text[labels[-1].end():]
        line, _, below = rest.partition("\n")
        # "Answer: C" keeps its line; "Answer:" alone takes what follows it
        return AnswerPart((line if line.strip() else below).strip(), "label")
    return AnswerPart(text, "whole")


def clip(text: str, limit: int = 200) -> str:
    """Text for `detail`: enough to audit, never a whole answer file."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"
