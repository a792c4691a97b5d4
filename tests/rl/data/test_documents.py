"""The files of a task: distractors (how many, from where, never giving the answer away),
neutral shuffled names, multi-part material split one part a file."""
from __future__ import annotations

import random
from collections import Counter

from insandbox.rl.data.documents import DistractorPool, files_in_name_order, lay_out
from insandbox.rl.data.items import Form, Item, Part, PartRef, ReadOptions, Skips
from insandbox.rl.data.settings import Settings
from insandbox.rl.data.sources import BY_NAME
from insandbox.rl.data.tasks import Task, make_tasks
from tests.rl.data import tiny


def tasks_of(name: str, tmp_path, settings: Settings) -> tuple[list[Task], DistractorPool]:
    reader = BY_NAME[name]
    items = list(reader.read(tiny.ALL[name](tmp_path), ReadOptions(random.Random(0)), Skips()))
    return make_tasks(items, reader, settings, Skips()), DistractorPool.of(items, settings.max_doc_chars)


def test_single_documents_get_distractors_under_neutral_shuffled_names(tmp_path):
    settings = Settings(distractors=(2, 4))
    tasks, pool = tasks_of("race", tmp_path, settings)
    counts, places = Counter(), Counter()
    for task in tasks:
        layout = lay_out(task, pool, settings)
        names = list(layout.files)
        assert names == [f"doc_{i:02d}.txt" for i in range(1, len(names) + 1)]
        assert 2 <= layout.distractors == len(names) - 1 <= 4
        own = layout.part_names[0]
        assert layout.files[own] == task.parts[0].text
        others = [text for name, text in layout.files.items() if name != own]
        assert len(set(others)) == len(others) and task.parts[0].text not in others  # other articles, once each
        assert all(" of article " in text for text in others)  # from the same source
        counts[layout.distractors] += 1
        places[own] += 1
    assert set(counts) == {2, 3, 4}  # drawn per task
    assert len(places) >= 3  # the material is not always in the same file


def test_tables_keep_csv(tmp_path):
    settings = Settings()
    tasks, pool = tasks_of("wikitablequestions", tmp_path, settings)
    for task in tasks:
        layout = lay_out(task, pool, settings)
        assert all(name.endswith(".csv") for name in layout.files) and len(layout.files) >= 2


def test_zero_distractors_and_a_pool_that_runs_short(tmp_path):
    tasks, pool = tasks_of("aqua", tmp_path, Settings(distractors=(0, 0)))
    assert all(len(lay_out(t, pool, Settings(distractors=(0, 0))).files) == 1 for t in tasks)
    wide = Settings(distractors=(9, 9))
    layout = lay_out(tasks[0], pool, wide)
    assert layout.distractors == 5 and layout.wanted == 9  # six problems in all


def test_multi_part_material_is_one_file_a_part_in_order(tmp_path):
    settings = Settings(distractors=(3, 3))
    tasks, pool = tasks_of("fairytaleqa", tmp_path, settings)
    for task in tasks:
        layout = lay_out(task, pool, settings)
        assert layout.distractors == 0 and list(layout.files.values()) == [p.text for p in task.parts]
        assert layout.part_names == ["doc_01.txt", "doc_02.txt", "doc_03.txt"]


def test_unordered_parts_are_shuffled_and_file_options_listed_by_name(tmp_path):
    settings = Settings()
    tasks, pool = tasks_of("tweeteval", tmp_path, settings)
    choice = [t for t in tasks if t.form.qa_type != "open"]
    assert choice
    moved = 0
    for task in choice:
        layout = lay_out(task, pool, settings)
        assert layout.distractors == 0 and len(layout.files) == len(task.parts)
        moved += layout.part_names != sorted(layout.part_names)
        arranged = files_in_name_order(task, layout)
        names = [layout.part_names[c.index] for c in arranged.form.choices]
        assert names == sorted(layout.files)  # option A is doc_01, ...
        picked = {layout.part_names[arranged.form.choices[i].index] for i in arranged.form.correct}
        assert picked == {layout.part_names[task.form.choices[i].index] for i in task.form.correct}
    assert moved


def _item(uid: str, text: str, answers=None, handle=None) -> Item:
    form = Form("open", "Q?", answers=answers) if answers else Form("single-choice", "Q?", ["a", "b"], [0])
    return Item(uid=uid, context=uid, parts=[Part(text)], forms=[form], handle=handle)


def test_a_distractor_never_holds_the_answer_or_the_quote_that_finds_the_material():
    items = [_item("own", "The capital is Paris.", answers=["Paris", "City of Paris"], handle="Which city?")]
    items += [_item(f"other{i}", f"Rome is old. Item {i}.") for i in range(6)]
    items += [_item("answer", "Paris is big."), _item("alias", "the city of paris at night"),
              _item("quote", "Which city? No one knows."), _item("partial", "Parisians like bread.")]
    pool = DistractorPool.of(items, 10_000)
    own = Task("s", "own", "own", items[0].parts, items[0].forms[0], handle="Which city?")
    for seed in range(30):
        drawn = {p.text for p in pool.draw(own, 7, random.Random(seed))}
        assert not drawn & {"Paris is big.", "the city of paris at night", "Which city? No one knows.",
                            "The capital is Paris."}
        assert len(drawn) == 7  # the six others and "Parisians" (not the word Paris)


def test_long_documents_are_neither_tasks_nor_distractors(tmp_path):
    settings = Settings(max_doc_chars=60)
    skips = Skips()
    reader = BY_NAME["logiqa"]
    items = list(reader.read(tiny.logiqa(tmp_path), ReadOptions(random.Random(0)), Skips()))
    items.append(_item("long", "x" * 61))
    assert make_tasks(items, reader, settings, skips) != [] and skips.counts == {
        "a document is longer than max_doc_chars": 1}
    assert all(len(p.text) <= 60 for _, p, _ in DistractorPool.of(items, 60).entries)


def test_part_refs_render_as_names():
    task = Task("s", "u", "c", [Part("one\n"), Part("two\n")], Form("single-choice", "Q?", [PartRef(0), PartRef(1)],
                                                                      [1]))
    layout = lay_out(task, DistractorPool(), Settings(seed=3))
    arranged = files_in_name_order(task, layout)
    assert layout.files[layout.part_names[arranged.form.choices[arranged.form.correct[0]].index]] == "two\n"
