"""The prompt: where the material is (never which file), the question and options, and exactly
what to write to /testbed/answer.txt, matching the row's ground_truth and options."""
from __future__ import annotations

import re

from insandbox.rl.data.documents import Layout
from insandbox.rl.data.items import Form, Part
from insandbox.rl.data.prompt import answer_instruction, ground_truth, material_line
from insandbox.rl.data.tasks import Task
from insandbox.rl.schema import DOCUMENTS_DIR, TaskRow
from tests.rl.data import tiny


def test_answer_instructions_say_exactly_what_to_write():
    single = Form("single-choice", "Q?", ["a", "b", "c"], [2])
    assert ground_truth(single) == "C"
    assert answer_instruction(single) == ("Write only the letter of the correct option (A, B or C) to "
                                          "/testbed/answer.txt.")
    multi = Form("multi-choice", "Q?", ["a", "b", "c", "d"], [3, 0])
    assert ground_truth(multi) == "A,D"
    assert "letters of all the correct options" in answer_instruction(multi)
    assert "separated by commas" in answer_instruction(multi) and "alphabetical" in answer_instruction(multi)
    number = Form("open", "How many?", answers=["1200", "1,200"], answer_type="number")
    assert ground_truth(number) == "1200" and "only the number" in answer_instruction(number)
    text = Form("open", "Who?", answers=["Ann Lee", "Lee"])
    assert ground_truth(text) == "Ann Lee" and "short phrase" in answer_instruction(text)


def test_the_multi_choice_example_is_never_a_possible_answer():
    """Issue 22: every multi-choice prompt showed "(for example: A,C)", the right answer of about 5% of
    the multi-choice tasks of a build. The example's letters are now outside the task's options."""
    from string import ascii_uppercase

    for count in range(2, 25):
        form = Form("multi-choice", "Q?", [f"option {i}" for i in range(count)], [0, 2 % count])
        said = answer_instruction(form)
        example = re.search(r"options ([A-Z]) and ([A-Z]) would be written ([A-Z]),([A-Z])", said)
        assert example, said
        assert not set(example.groups()) & set(ascii_uppercase[:count]), said
        assert "A,C" not in said


def test_material_line_names_the_folder_never_the_file():
    part = Part("text\n")
    task = Task("s", "u", "c", [part], Form("open", "Q?", answers=["x"]))
    layout = Layout({"doc_01.txt": "a", "doc_02.txt": "text\n", "doc_03.txt": "b"}, ["doc_02.txt"], 2)
    line = material_line(task, layout, "article")
    assert line == (f"One of the 3 files in {DOCUMENTS_DIR} holds the article this question is about. "
                    "The other files are unrelated.")
    alone = Layout({"doc_01.txt": "text\n"}, ["doc_01.txt"])
    assert material_line(task, alone, "article") == (f"The article this question is about is the one file in "
                                                     f"{DOCUMENTS_DIR}.")
    found = Task("s", "u", "c", [part], Form("open", "Q?", answers=["1"]), handle="How far is it?")
    assert 'its question reads: "How far is it?"' in material_line(found, layout, "math word problem")
    story = Task("s", "u", "c", [part, part], Form("open", "Q?", answers=["x"]), ordered=True)
    two = Layout({"doc_01.txt": "a", "doc_02.txt": "b"}, ["doc_01.txt", "doc_02.txt"])
    assert "in order: doc_01.txt is the beginning and doc_02.txt the end" in material_line(story, two, "story")


def test_every_built_prompt_is_consistent_with_its_row(tmp_path):
    rows = tiny.build_all(tmp_path).rows
    for r in rows:
        TaskRow(**r)  # the row contract
        text = r["problem_statement"]
        assert DOCUMENTS_DIR in text and "/testbed/answer.txt" in text
        task_part = text.split("Your task:")[-1]
        letters = re.findall(r"^([A-Z])\. ", task_part, re.M)
        if r["qa_type"] == "open":
            assert letters == [] and r["options"] == [] and r["ground_truth"]
        else:
            assert letters == r["options"] == [chr(65 + i) for i in range(len(letters))]
            gold = r["ground_truth"].split(",")
            assert gold == sorted(set(gold)) and set(gold) <= set(r["options"])
            assert len(gold) == 1 if r["qa_type"] == "single-choice" else len(gold) >= 1
        if len(r["input_files"]) > 1 and r["source"] not in ("fairytaleqa", "tweeteval"):
            assert "doc_" not in task_part  # one document among distractors: no file named
        for name in r["input_files"]:
            assert re.fullmatch(r"doc_\d{2,}\.(txt|csv)", name)
