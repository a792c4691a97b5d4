"""The words of a task: where the material is, the question and its options, how to write the
answer, and the in-context examples before it.

The answer instructions match how the rewards read /testbed/answer.txt:
  single-choice  one option letter
  multi-choice   the correct letters, sorted, comma-separated ("A,C")
  open           a short text (compared after normalisation) or a plain number
"""
from __future__ import annotations

from string import ascii_uppercase
from typing import Optional

from ..schema import DOCUMENTS_DIR
from .documents import Layout
from .items import Choice, Form, PartRef
from .tasks import Task
from .text import one_line

ANSWER_FILE = "/testbed/answer.txt"
QUOTE_CHARS = 200  # how much of a file an in-context example quotes in place of its name


def letters(form: Form) -> list[str]:
    return list(ascii_uppercase[:len(form.choices)])


def ground_truth(form: Form) -> str:
    if form.qa_type == "open":
        return form.answers[0]
    return ",".join(sorted(ascii_uppercase[i] for i in form.correct))


def _choice(choice: Choice, task: Task, layout: Optional[Layout]) -> str:
    if not isinstance(choice, PartRef):
        return choice
    if layout is not None:
        return layout.part_names[choice.index]
    text = one_line(task.parts[choice.index].text)  # an example's files are not in this sandbox: quote them
    return '"' + (text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS].rstrip() + " ...") + '"'


def question_block(task: Task, layout: Optional[Layout] = None) -> str:
    """The question and its lettered options; without a layout (an example), files are quoted."""
    lines = [f"Question: {task.form.question}"]
    lines += [f"{letter}. {_choice(c, task, layout)}" for letter, c in zip(letters(task.form), task.form.choices)]
    return "\n".join(lines)


def _or_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def answer_instruction(form: Form) -> str:
    if form.qa_type == "single-choice":
        return f"Write only the letter of the correct option ({_or_list(letters(form))}) to {ANSWER_FILE}."
    if form.qa_type == "multi-choice":
        # the example's letters are never the task's own: a fixed "A,C" was the right answer of ~5% of tasks
        spare = [x for x in ascii_uppercase if x not in letters(form)][-2:]
        example = (f" (for example, options {spare[0]} and {spare[1]} would be written {spare[0]},{spare[1]})"
                   if len(spare) == 2 else "")
        return (f"One or more options are correct. Write the letters of all the correct options to {ANSWER_FILE}, "
                f"in alphabetical order, separated by commas and nothing else{example}.")
    if form.answer_type == "number":
        return f"Write only the number to {ANSWER_FILE} (digits; no units, no thousands separators)."
    return (f"Write only the answer to {ANSWER_FILE}: a short phrase of a few words (in the material's own words "
            "where it can be), not a sentence.")


def material_line(task: Task, layout: Layout, material: str) -> str:
    n = len(layout.files)
    if len(task.parts) > 1 and task.ordered:
        first, last = layout.part_names[0], layout.part_names[-1]
        return (f"The {material} is split over the {n} files in {DOCUMENTS_DIR}, in order: {first} is the "
                f"beginning and {last} the end.")
    if len(task.parts) > 1:
        return f"The {n} files in {DOCUMENTS_DIR} hold one {material} each."
    what = f"the {material} to solve" if task.handle else f"the {material} this question is about"
    where = (f"{what[0].upper() + what[1:]} is the one file in {DOCUMENTS_DIR}" if n == 1 else
             f"One of the {n} files in {DOCUMENTS_DIR} holds {what}")
    found = f'; its question reads: "{task.handle}"' if task.handle else ""
    rest = "." if n == 1 else ". The other files are unrelated."
    return where + found + rest


def example_block(number: int, task: Task) -> str:
    head = [f"Example {number}:"]
    if task.handle:  # the question only points at the problem: show the problem itself
        head.append(f"Problem: {one_line(task.parts[0].text)}")
    return "\n".join(head + [question_block(task), f"Answer: {ground_truth(task.form)}"])


def problem_statement(task: Task, layout: Layout, material: str, examples: list[Task]) -> str:
    blocks = []
    if examples:
        blocks.append("Examples of solved tasks of the same kind (their material is not on this computer):")
        blocks += [example_block(i, ex) for i, ex in enumerate(examples, 1)]
        blocks.append("Your task:")
    blocks += [material_line(task, layout, material), question_block(task, layout), answer_instruction(task.form)]
    return "\n\n".join(blocks)
