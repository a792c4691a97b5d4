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

# \text{A, C} inside a box is the text itself
_LATEX_TEXT = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_LABEL = re.compile(
    r"^[ \t>#*_]*(?:the\s+)?(?:final\s+|correct\s+|right\s+|best\s+)?(?:answers?|options?|choices?)[*_]{0,2}"
    r"(?:\s+(?:is|are)\b[ \t]*[:：]?|[ \t]*[:：])[*_]{0,2}[ \t]*", re.I | re.M)


@dataclass
class AnswerPart:
    text: str  # what the qa_type reads
    source: str  # "boxed", "label", "whole" or "empty" (only thinking, or nothing)


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
