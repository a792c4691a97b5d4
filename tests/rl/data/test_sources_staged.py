"""Each reader on the staged public source data (../shared/data/rl_sources): counts as
SOURCES.md gives them, and one known item read field by field."""
from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from insandbox.rl.data.items import Item, ReadOptions, Skips
from insandbox.rl.data.sources import BY_NAME, recognise
from tests.helpers import shared_data

pytestmark = pytest.mark.shared_data


def staged(name: str) -> Path:
    return shared_data() / "rl_sources" / name


def read(name: str) -> tuple[list[Item], dict[str, int]]:
    skips = Skips()
    return list(BY_NAME[name].read(staged(name), ReadOptions(random.Random(0)), skips)), skips.counts


def test_every_staged_folder_is_recognised():
    for name in BY_NAME:
        assert recognise(staged(name)).name == name


def test_qed():
    items, skips = read("qed")
    assert len(items) == 1355 - 151 and skips == {"no supported answer (explanation_type none)": 151}
    first = items[0]
    assert first.uid == "dev-n3290814144789249484" and first.origin == "qed-dev.jsonlines:1"
    form = first.forms[0]
    assert form.question == "Who got the first nobel prize in physics?"
    assert form.answers[:2] == ["Wilhelm Conrad Röntgen", "Wilhelm Conrad Röntgen, of Germany"]
    assert first.parts[0].text.startswith("The first Nobel Prize in Physics was awarded in 1901 to Wilhelm Conrad "
                                          "Röntgen, of Germany, who received 150,782 SEK")


def test_wikitablequestions():
    items, skips = read("wikitablequestions")
    kinds = Counter(it.forms[0].qa_type for it in items)
    # 2,000 questions; 71 list answers become multi-choice unless too long or without other values
    assert len(items) + sum(skips.values()) == 2000 and kinds["multi-choice"] == 71 - sum(skips.values())
    first = items[0]
    assert first.uid == "nt-0" and first.context == "csv/204-csv/590.csv"
    assert first.forms[0].answers == ["2004"] and first.forms[0].answer_type == "number"
    header = "Year,Division,League,Regular Season,Playoffs,Open Cup,Avg. Attendance"
    assert first.parts[0].text.splitlines()[0] == header
    listed = next(it for it in items if it.uid == "nt-9").forms[0]
    assert listed.qa_type == "multi-choice"
    assert sorted(listed.choices[i] for i in listed.correct) == ["Andri Aganits", "Siim Ennemuist"]


def test_fairytaleqa():
    items, skips = read("fairytaleqa")
    assert len(items) == 10580 and skips == {}
    assert len({it.context for it in items}) == 232 + 23 + 23
    first = items[0]
    assert first.uid == "test-alleleiraugh-or-the-many-furred-creature-1" and first.ordered
    assert first.forms[0].question == "What kind of hair did the wife have?"
    assert first.forms[0].answers == ["golden hair"]
    assert len(first.parts) == 11 and first.parts[0].text.startswith("There was once upon a time a King who had a wife")
    val = next(it for it in items if it.uid == "val-assipattle-and-the-mester-stoorworm-4")
    assert val.forms[0].answers == ["wondrous stories of Trolls and Giants, Elves and Goblins",
                                    "stories of Trolls and Giants, Elves and Goblins."]


def test_mctest():
    items, skips = read("mctest")
    assert len(items) == 2640 and skips == {} and len({it.context for it in items}) == 660
    tom = [it for it in items if it.context == "mc160.train.0"]
    form = tom[0].forms[0]
    assert form.question == "What was the hardest thing for Tom and his friends to fix?"
    assert form.choices == ["Door", "House", "Window", "Toilet"] and form.correct == [2]
    assert "\\newline" not in tom[0].parts[0].text and "\r" not in tom[0].parts[0].text
    assert tom[0].parts[0].text.startswith("Tom had to fix some things around the house. He had to fix the door. "
                                           "He had to fix the window.")


def test_race():
    items, skips = read("race")
    assert len(items) == 3002 and skips == {} and len({it.context for it in items}) == 828
    first = next(it for it in items if it.uid == "train-high-1-q1")
    form = first.forms[0]
    assert form.question == "The husband likes shopping because ___."
    assert form.choices[form.correct[0]] == "he likes to compare the prices between the same items."


def test_logiqa():
    items, skips = read("logiqa")
    assert len(items) == 1302 and skips == {}
    assert Counter(it.origin.split(":")[0] for it in items) == {"Eval.txt": 651, "Test.txt": 651}
    assert Counter(it.forms[0].correct[0] for it in items if it.origin.startswith("Eval"))[3] == 270  # d: 270
    first = items[0]
    assert first.parts[0].text.startswith("Black Americans are twice as likely to suffer from hypertension as white "
                                          "Americans. The same is true")  # the glued full stop parted
    assert all(len(it.forms[0].choices) == 4 and all(it.forms[0].choices) for it in items)


def test_aqua():
    items, skips = read("aqua")
    assert len(items) == 508 and skips == {}
    first = items[0]
    assert first.handle == "What is their speed in miles per minute?"  # its question, not the note after it
    single, numeric = first.forms
    assert single.choices == ["32400", "6000", "600", "60000", "10"] and single.correct == [0]
    assert numeric.answers == ["32400"] and numeric.answer_type == "number"


def test_tweeteval():
    items, skips = read("tweeteval")
    label_sets = Counter(it.uid.rsplit("-g", 1)[0] for it in items)
    assert set(label_sets) == {"emoji", "emotion", "hate", "irony", "offensive", "sentiment", "stance-abortion",
                               "stance-atheism", "stance-climate", "stance-feminist", "stance-hillary"}
    assert all(n <= 150 for n in label_sets.values()) and label_sets["emoji"] == 150
    lines = [o for it in items for o in it.origin.split(", ")]
    assert len(lines) == len(set(lines))  # each tweet used once
    assert not any(o.startswith("sentiment/train") for o in lines)  # that split's text is not staged
    # the answers agree with the label files
    labels = {}
    for split in ("train", "val", "test"):
        path = staged("tweeteval") / "datasets" / "irony" / f"{split}_labels.txt"
        labels.update({f"irony/{split}:{n}": int(x) for n, x in enumerate(path.read_text().split(), 1)})
    irony = [it for it in items if it.uid.startswith("irony-")]
    assert irony
    for it in irony:
        target = 0 if "not ironic" in it.forms[0].question else 1
        hits = [i for i, o in enumerate(it.origin.split(", ")) if labels[o] == target]
        form = it.forms[0]
        assert (form.answers == [str(len(hits))]) if form.qa_type == "open" else (form.correct == hits)
