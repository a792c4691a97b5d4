"""Multi-choice questions: several single-choice questions on one material merged into "which
statements are true", and how often materials are merged."""
from __future__ import annotations

import random
from collections import Counter

from insandbox.rl.data.items import Form, Item, Part, ReadOptions, Skips
from insandbox.rl.data.merge import can_merge, merge, statement
from insandbox.rl.data.settings import Settings
from insandbox.rl.data.sources import BY_NAME
from insandbox.rl.data.tasks import make_tasks
from tests.rl.data import tiny


def test_statements_fill_blanks_or_pair_question_and_answer():
    assert statement("The fox likes ___.", "apples.") == "The fox likes apples."
    assert statement("___ is the fox's friend.", "a blue bird") == "A blue bird is the fox's friend."
    assert statement("Where does it sleep?", "In a tree.") == 'The answer to "Where does it sleep?" is "In a tree".'


def test_options_that_lean_on_others_cannot_be_merged():
    assert can_merge(Form("single-choice", "Q?", ["a", "b", "c"], [0]))
    assert not can_merge(Form("single-choice", "Q?", ["a", "b", "All of the above"], [2]))
    assert not can_merge(Form("single-choice", "Q?", ["a", "b", "Both A and B"], [2]))
    assert not can_merge(Form("single-choice", "Fill ___ and ___.", ["a", "b"], [0]))
    assert not can_merge(Form("open", "Q?", answers=["x"]))


def _items(n: int) -> list[Item]:
    return [Item(uid=f"q{i}", context="story", parts=[Part("text\n")], mergeable=True,
                 forms=[Form("single-choice", f"Question {i}?", [f"right {i}", f"wrong {i}a", f"wrong {i}b"], [0])])
            for i in range(n)]


def test_the_letters_are_exactly_the_true_statements():
    seen = Counter()
    for seed in range(200):
        form = merge(_items(4), "story", random.Random(seed))
        assert form.qa_type == "multi-choice" and len(form.choices) == 4
        assert form.question == "Which of the following statements about the story are true?"
        true = [i for i, c in enumerate(form.choices) if '"right ' in c]
        assert form.correct == true and true  # at least one statement is true
        seen[len(true)] += 1
    assert set(seen) == {1, 2, 3, 4}  # every number of true statements occurs


def test_materials_are_merged_at_the_share_asked_and_questions_used_once(tmp_path):
    reader = BY_NAME["race"]
    items = list(reader.read(tiny.race(tmp_path), ReadOptions(random.Random(0)), Skips()))
    for share, merged in ((0.0, 0), (1.0, 7)):
        tasks = make_tasks(items, reader, Settings(merge_share=share), Skips())
        multi = [t for t in tasks if t.form.qa_type == "multi-choice"]
        assert len(multi) == merged
        # each merged task takes the 3 mergeable questions; "All of the above" questions stay single
        assert len(tasks) == 28 - 3 * merged + merged
        assert all(t.uid.endswith("-q1-m3") and t.origin.count("#q") == 3 for t in multi)
    only_multi = make_tasks(items, reader, Settings(qa_types=("multi-choice",)), Skips())
    assert len(only_multi) == 7 and {t.form.qa_type for t in only_multi} == {"multi-choice"}
    half = [make_tasks(items, reader, Settings(seed=s), Skips()) for s in range(20)]
    assert 0 < sum(sum(t.form.qa_type == "multi-choice" for t in ts) for ts in half) < 20 * 7
