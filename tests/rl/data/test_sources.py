"""Each reader on a tiny folder in its format (written to tmp_path): what it yields, and how it
handles its source's quirks; which folder layouts are recognised."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from insandbox.rl.data.items import Item, PartRef, ReadOptions, Skips
from insandbox.rl.data.sources import BY_NAME, READERS, SourceError, recognise
from insandbox.rl.data.sources.tweeteval import GROUP_SIZE
from insandbox.rl.data.sources.wikitablequestions import split_answer, unescape
from tests.rl.data import tiny


def read(name: str, folder: Path, seed: int = 0, qa_types=None) -> tuple[list[Item], dict[str, int]]:
    skips = Skips()
    options = ReadOptions(random.Random(seed), **({"qa_types": qa_types} if qa_types else {}))
    return list(BY_NAME[name].read(folder, options, skips)), skips.counts


@pytest.mark.parametrize("name", sorted(tiny.ALL))
def test_each_tiny_folder_is_recognised_as_its_source(tmp_path, name):
    assert recognise(tiny.ALL[name](tmp_path)).name == name


def test_a_folder_of_no_known_layout_is_named_in_the_error(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(SourceError) as e:
        recognise(tmp_path)
    assert str(tmp_path) in str(e.value) and "not laid out like any known source" in str(e.value)
    assert all(r.name in str(e.value) for r in READERS)  # it says what each source looks like
    with pytest.raises(SourceError, match="does not exist"):
        recognise(tmp_path / "missing")
    with pytest.raises(SourceError, match="not a folder"):
        recognise(tmp_path / "notes.txt")


def test_the_parent_of_several_sources_is_not_taken_for_one(tmp_path):
    tiny.all_sources(tmp_path)
    with pytest.raises(SourceError, match="not laid out like any known source"):
        recognise(tmp_path)


def test_a_look_alike_file_name_is_not_enough(tmp_path):
    (tmp_path / "Train.txt").write_text("just some training notes\n")  # not LogiQA's blocks
    (tmp_path / "dev.json").write_text('{"text": "not AQuA"}\n')
    with pytest.raises(SourceError):
        recognise(tmp_path)


def test_qed_skips_none_rows_detokenises_and_keeps_every_answer_form(tmp_path):
    items, skips = read("qed", tiny.qed(tmp_path))
    assert len(items) == 8 and skips == {"no supported answer (explanation_type none)": 1}
    first = items[0]
    assert first.uid == "dev-n101" and items[1].uid == "dev-101"  # signed ids stay apart
    assert first.parts[0].text == "The theme song was performed by Destiny's Child, with Solange Knowles (then 13).\n"
    form = first.forms[0]
    assert form.qa_type == "open" and form.question == "Who sang the theme song for the show?"
    assert form.answers[0] == "Destiny's Child"  # QED's own span, detokenised like the passage
    assert "Destiny 's Child" in form.answers  # the tokenised form stays an alias
    assert "Solange Knowles, Destiny's Child" in form.answers  # a multi-span NQ answer, joined
    assert items[1].forms[0].answers == ["11 metres"]  # no QED span: the NQ answer


def test_wikitablequestions_escapes_numbers_and_list_answers(tmp_path):
    items, skips = read("wikitablequestions", tiny.wikitablequestions(tmp_path))
    assert [it.uid for it in items] == ["nt-0", "nt-1", "nt-2", "nt-3", "nt-4"]  # the random split is not read
    by = {it.uid: it for it in items}
    assert by["nt-0"].parts[0].ext == ".csv" and by["nt-0"].context == "csv/200-csv/0.csv"
    assert '"The ""Quoted"" Club",Back\\slash,7' in by["nt-0"].parts[0].text  # WTQ escapes -> standard CSV
    assert by["nt-4"].forms[0].answers == ['The "Quoted" Club']
    number = by["nt-1"].forms[0]
    assert number.answer_type == "number" and number.answers == ["1001", "1,001"]
    assert by["nt-3"].forms[0].question == "What city is listed|first?"  # \n and \p undone, on one line
    assert by["nt-0"].forms[0].answer_type == "text"
    listed = by["nt-2"].forms[0]
    assert listed.qa_type == "multi-choice" and listed.question == "Which teams scored under 1,150?"
    assert sorted(listed.choices[i] for i in listed.correct) == ["Green Foxs", "Yellow Owls"]
    wrong = [c for i, c in enumerate(listed.choices) if i not in listed.correct]
    team_column = {line.split(",")[0] for line in by["nt-2"].parts[0].text.splitlines()[1:]}
    assert 2 <= len(wrong) and set(wrong) <= team_column  # distractors from the column holding the answers
    assert skips == {}


def test_wikitablequestions_split_and_unescape():
    assert split_answer("a|b\\pc|d\\\\e") == ["a", "b|c", "d\\e"]
    assert unescape("x\\ny\\\\z\\p") == "x\ny\\z|"


def test_fairytaleqa_sections_in_order_references_and_repeated_ids(tmp_path):
    items, skips = read("fairytaleqa", tiny.fairytaleqa(tmp_path))
    assert len(items) == 9 and skips == {}
    fox = [it for it in items if it.context == "train/brave-fox"]
    assert [it.uid for it in fox] == ["train-brave-fox-1", "train-brave-fox-2", "train-brave-fox-3"]  # ids 1, 1, 2
    assert [p.text for p in fox[0].parts] == ["Once upon a time a fox lived in the\nforest by the river.\n",
                                              "One day the fox found a golden key under a stone.\n",
                                              "At last the fox went home to sleep.\n"]  # sections 1, 2, 3
    assert fox[0].ordered and fox[0].forms[0].answers == ["in the forest", "by the river"]
    assert fox[0].origin == "data-by-train-split/questions/train/brave-fox-questions.csv#row1"


def test_mctest_crlf_newline_escapes_prefixes_and_test_answers(tmp_path):
    items, skips = read("mctest", tiny.mctest(tmp_path))
    assert len(items) == 16 and skips == {}
    first = next(it for it in items if it.uid == "mc160.train.0-q3")
    assert first.parts[0].text == ("The fox had a red hat. It wore the hat every day.\n\n"
                                   "One day the fox lost the hat in the snow.\n")
    form = first.forms[0]
    assert form.question == "How often did the fox wear the hat?"  # "multiple: " dropped
    assert form.choices == ["never", "every day", "once", "on Sundays"] and form.correct == [1]
    assert first.mergeable and first.context == "mc160.train.0"
    test_story = [it for it in items if it.context == "mc160.test.0"]
    assert len(test_story) == 4 and test_story[0].forms[0].choices[0] == "white"  # answers from MCTestAnswers/


def test_mctest_without_answers_is_counted_not_guessed(tmp_path):
    folder = tiny.mctest(tmp_path)
    (folder / "MCTestAnswers" / "mc160.test.ans").unlink()
    items, skips = read("mctest", folder)
    assert len(items) == 12 and skips == {"no answer file": 4}


def test_race_one_item_per_question_with_tidy_blanks(tmp_path):
    items, skips = read("race", tiny.race(tmp_path))
    assert len(items) == 28 and skips == {}
    first = items[8]
    assert first.uid == "train-middle-1-q1" and first.context == "train/middle/1"
    assert first.forms[0].question == "The owl likes ___."
    assert items[10].forms[0].question == "___ is the owl's best friend."
    assert [it.context for it in items[::4]] == ["train/high/1", "train/high/2", "train/middle/1", "train/middle/2",
                                                 "train/middle/3", "train/middle/4", "train/middle/5"]


def test_logiqa_blocks_glued_sentences_and_garbled_marks(tmp_path):
    items, skips = read("logiqa", tiny.logiqa(tmp_path))
    assert len(items) == 6 and skips == {}
    assert items[0].parts[0].text == "All foxs in the valley are red. Some of them can swim.\n"
    assert items[0].forms[0].choices[:2] == ["Some foxs are red.", "No fox swims."]  # "swims.." in the source
    assert items[0].forms[0].correct == [0]
    assert items[1].forms[0].choices == ["No owl is grey.", "Some swim.", "Most of the owls on the S hill.",
                                         "None of these."]
    assert items[1].forms[0].correct == [1] and items[3].forms[0].correct == [3]
    assert items[1].origin == "Eval.txt:10"


def test_logiqa_a_broken_block_names_its_line(tmp_path):
    folder = tiny.logiqa(tmp_path)
    lines = (folder / "Eval.txt").read_text().split("\n")
    lines[9] = "e"  # the second example's gold letter
    (folder / "Eval.txt").write_text("\n".join(lines))
    with pytest.raises(SourceError, match=r"Eval.txt:10"):
        read("logiqa", folder)


def test_aqua_is_single_choice_and_open_only_when_every_option_is_a_plain_number(tmp_path):
    items, _ = read("aqua", tiny.aqua(tmp_path))
    assert len(items) == 6
    first = items[0]
    assert first.handle == "How many people ride on the fox train in total?"
    assert first.handle in first.parts[0].text
    single, numeric = first.forms
    assert single.choices[1] == "$200" and single.correct == [1]
    assert numeric.qa_type == "open" and numeric.answer_type == "number" and numeric.answers == ["200", "$200"]
    assert [len(it.forms) for it in items] == [2, 1, 1, 1, 2, 2]  # mixed units, millions, a text option
    assert items[4].forms[1].answers == ["20", "20 m"] and "(in m)" in items[4].forms[1].question
    assert items[5].forms[1].answers == ["4,200".replace(",", ""), "$4,200"]


def _label_of(text: str) -> int:
    return next(label for label, texts in tiny.IRONY.items() if text.strip() in texts)


def test_tweeteval_groups_fit_their_question(tmp_path):
    items, skips = read("tweeteval", tiny.tweeteval(tmp_path))
    assert skips == {"empty tweet": 1}
    irony = [it for it in items if it.uid.startswith("irony-")]
    stance = [it for it in items if it.uid.startswith("stance-abortion-")]
    assert irony and stance and len(irony) + len(stance) == len(items)
    used = [p.text for it in items for p in it.parts]
    assert len(used) == len(set(used))  # a tweet is used once
    for it in irony:
        assert GROUP_SIZE[0] <= len(it.parts) <= GROUP_SIZE[1] and not it.ordered
        form = it.forms[0]
        target = 0 if "not ironic" in form.question else 1
        hits = [i for i, p in enumerate(it.parts) if _label_of(p.text) == target]
        if form.qa_type == "open":
            assert form.answer_type == "number" and form.answers == [str(len(hits))]
        else:
            assert all(isinstance(c, PartRef) for c in form.choices) and len(form.choices) == len(it.parts)
            assert form.correct == hits
            assert len(hits) == 1 if form.qa_type == "single-choice" else 1 <= len(hits) < len(it.parts)
    assert any("stance" in it.forms[0].question for it in stance)


def test_tweeteval_builds_only_the_asked_forms_and_depends_on_the_seed(tmp_path):
    folder = tiny.tweeteval(tmp_path)
    items, _ = read("tweeteval", folder, qa_types=("open",))
    assert {it.forms[0].qa_type for it in items} == {"open"}
    again, _ = read("tweeteval", folder, qa_types=("open",))
    assert [[p.text for p in it.parts] for it in items] == [[p.text for p in it.parts] for it in again]
    other, _ = read("tweeteval", folder, seed=1, qa_types=("open",))
    assert [[p.text for p in it.parts] for it in items] != [[p.text for p in it.parts] for it in other]


def test_tweeteval_label_files_must_match(tmp_path):
    folder = tiny.tweeteval(tmp_path)
    (folder / "datasets" / "irony" / "val_labels.txt").write_text("0\n1\n")
    with pytest.raises(SourceError, match="tweets but 2 labels"):
        read("tweeteval", folder)
