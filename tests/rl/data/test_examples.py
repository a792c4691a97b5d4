"""In-context examples: earlier tasks of the same source and kind, with their answers, in the
prompt; never the task itself, its material, a copy of it, or an answer it accepts."""
from __future__ import annotations

from insandbox.rl.data.examples import pick_examples
from insandbox.rl.data.items import Form, Part
from insandbox.rl.data.tasks import Task
from tests.rl.data import tiny


def _open(uid: str, context: str, question: str, *answers: str, answer_type="text") -> Task:
    form = Form("open", question, answers=list(answers), answer_type=answer_type)
    return Task("s", uid, context, [Part("x\n")], form)


def _single(uid: str, context: str, question: str, choices=("a", "b")) -> Task:
    return Task("s", uid, context, [Part("x\n")], Form("single-choice", question, list(choices), [0]))


def test_nearest_earlier_tasks_wrapping_round():
    tasks = [_open(f"t{i}", f"c{i}", f"Question {i}?", f"answer {i}") for i in range(5)]
    assert pick_examples(tasks, 2) == [[4, 3], [0, 4], [1, 0], [2, 1], [3, 2]]
    assert pick_examples(tasks, 0) == [[]] * 5
    assert pick_examples(tasks, 9) == [[4, 3, 2, 1], [0, 4, 3, 2], [1, 0, 4, 3], [2, 1, 0, 4], [3, 2, 1, 0]]


def test_examples_skip_other_kinds_the_same_material_copies_and_shared_answers():
    tasks = [
        _open("a", "c1", "Who wrote it?", "Ann"),
        _single("b", "c2", "Which one?"),  # another kind
        _open("c", "c3", "When?", "1999", answer_type="number"),  # another answer type
        _open("d", "c9", "Who sang it?", "ann"),  # an answer the last task accepts (after normalisation)
        _open("e", "c9", "Who drew it?", "Bob"),  # the last task's own material
        _open("f", "c4", "Who read it?", "Cy"),
        _open("g", "c9", "Who played it?", "Ann", "Dee"),
    ]
    assert pick_examples(tasks, 3)[6] == [5]  # a is out too: it answers "Ann"
    copies = [_single("x", "c1", "Which one?"), _single("y", "c2", "Which one?"), _single("z", "c3", "Which one?",
                                                                                            ("a", "c"))]
    assert pick_examples(copies, 2)[1] == [2]  # x is the same question with the same options: a copy


def test_built_rows_show_their_examples_with_answers(tmp_path):
    rows = tiny.build_all(tmp_path, examples=2).rows
    by_id = {r["id"]: r for r in rows}
    with_examples = 0
    for r in rows:
        for n, eid in enumerate(r["example_ids"], 1):
            ex = by_id[eid]
            assert ex["source"] == r["source"] and ex["qa_type"] == r["qa_type"] and eid != r["id"]
            assert ex["answer_type"] == r["answer_type"]
            assert f"Example {n}:" in r["problem_statement"]
            block = r["problem_statement"].split(f"Example {n}:")[1].split("\n\n")[0]
            assert block.rstrip().endswith(f"Answer: {ex['ground_truth']}")
            if r["qa_type"] == "open":
                assert {a.lower() for a in [ex["ground_truth"], *ex["aliases"]]}.isdisjoint(
                    {a.lower() for a in [r["ground_truth"], *r["aliases"]]})
        with_examples += bool(r["example_ids"])
        if r["example_ids"]:
            task_part = r["problem_statement"].split("Your task:")[1]
            assert "Example" not in task_part and "Answer:" not in task_part  # its own answer is never shown
        else:
            assert "Example" not in r["problem_statement"]
    assert with_examples > len(rows) * 0.8


def test_examples_are_earlier_rows_of_the_same_source_nearest_first(tmp_path):
    rows = tiny.build_all(tmp_path, examples=3).rows
    for source in {r["source"] for r in rows}:
        mine = [r for r in rows if r["source"] == source]
        ids = [r["id"] for r in mine]
        for i, r in enumerate(mine):
            back = [(i - ids.index(eid)) % len(ids) for eid in r["example_ids"]]  # how far back, wrapping round
            assert back == sorted(back) and 0 not in back


def test_no_examples_when_asked_for_none(tmp_path):
    rows = tiny.build_all(tmp_path, examples=0).rows
    assert all(r["example_ids"] == [] and "Example" not in r["problem_statement"] for r in rows)
