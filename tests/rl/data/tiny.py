"""Tiny source folders in each format, written by the tests into tmp_path (no ../shared needed).

Each keeps its source's quirks: QED's tokenised text and "none" rows, WTQ's escapes and list
answers, FairytaleQA's repeated question ids, MCTest's CRLF and \\newline, RACE's cloze
blanks, LogiQA's 8-line blocks and garbled option marks, AQuA's mixed units, TweetEval's
mapping files and stance folders."""
from __future__ import annotations

import json
from pathlib import Path

COLOURS = ["red", "blue", "green", "yellow", "purple", "orange", "white", "black"]
ANIMALS = ["fox", "owl", "bear", "hare", "wolf", "crow", "deer", "frog"]


def qed(root: Path) -> Path:
    """8 answerable rows and one "none" row; row 0 has a tokenised answer and three NQ answers."""
    folder = root / "qed"
    folder.mkdir(parents=True)
    rows = [{
        "example_id": -101, "title_text": "Destiny 's Child", "question_text": "who sang the theme song for the show",
        "paragraph_text": "The theme song was performed by Destiny 's Child , with Solange Knowles ( then 13 ) .",
        "original_nq_answers": [[{"string": "Destiny 's Child"}], [{"string": "Solange Knowles"},
                                                                    {"string": "Destiny 's Child"}]],
        "annotation": {"explanation_type": "single_sentence",
                       "answer": [{"paragraph_reference": {"string": "Destiny 's Child"}}]}}]
    for i in range(1, 8):
        rows.append({
            "example_id": 100 + i, "title_text": f"Lake {i}", "question_text": f"how deep is lake number {i}",
            "paragraph_text": f"Lake number {i} lies in the {COLOURS[i]} hills . It is {i * 11} metres deep .",
            "original_nq_answers": [[{"string": f"{i * 11} metres"}]],
            "annotation": {"explanation_type": "multi_sentence"}})
    rows.append({"example_id": 999, "question_text": "why is the sky blue", "paragraph_text": "Skies vary .",
                 "original_nq_answers": [[{"string": "Skies vary"}]], "annotation": {"explanation_type": "none"}})
    (folder / "qed-dev.jsonlines").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def wikitablequestions(root: Path) -> Path:
    """7 tables; questions: a text answer, a number with a thousands comma, a list, escapes."""
    folder = root / "wikitablequestions"
    (folder / "data").mkdir(parents=True)
    (folder / "csv" / "200-csv").mkdir(parents=True)
    for t in range(7):
        lines = ['"Team","City","Points"']
        lines += [f'"{COLOURS[(t + r) % 8].title()} {ANIMALS[r]}s","Town {t}{r}","{1000 + 100 * r + t}"'
                  for r in range(6)]
        if t == 0:
            lines.append('"The \\"Quoted\\" Club","Back\\\\slash","7"')
        (folder / "csv" / "200-csv" / f"{t}.csv").write_text("\n".join(lines) + "\n")
    questions = [
        ("nt-0", "which team has the most points?", "csv/200-csv/0.csv", "Orange Crows"),
        ("nt-1", "how many points did the blue foxs get?", "csv/200-csv/1.csv", "1,001"),
        ("nt-2", "which teams scored under 1,150?", "csv/200-csv/2.csv", "Green Foxs|Yellow Owls"),
        ("nt-3", "what city\\nis listed\\pfirst?", "csv/200-csv/3.csv", "Town 30"),
        ("nt-4", "which club has quotes in its name?", "csv/200-csv/0.csv", 'The "Quoted" Club'),
    ]
    text = "id\tutterance\tcontext\ttargetValue\n" + "".join("\t".join(q) + "\n" for q in questions)
    (folder / "data" / "training.tsv").write_text(text)
    # the random splits repeat training rows: never read twice
    (folder / "data" / "random-split-1-train.tsv").write_text(text)
    return folder


def fairytaleqa(root: Path) -> Path:
    """Two train stories of 3 sections (listed out of order) and one val story; a repeated
    question_id, a question with two references, one whose answers are all long."""
    base = root / "fairytaleqa" / "data-by-train-split"
    header = ("question_id,local-or-sum,cor_section,attribute1,attribute2,question,ex-or-im1,answer1,answer2,"
              "answer3,ex-or-im2,answer4,answer5,answer6\n")
    stories = (("train", "brave-fox", "fox"), ("train", "wise-owl", "owl"), ("val", "old-bear", "bear"))
    for split, story, animal in stories:
        (base / "section-stories" / split).mkdir(parents=True, exist_ok=True)
        (base / "questions" / split).mkdir(parents=True, exist_ok=True)
        sections = [(3, f"At last the {animal} went home to sleep."),
                    (1, f"Once upon a time a {animal} lived in the\nforest by the river."),
                    (2, f"One day the {animal} found a golden key under a stone.")]
        (base / "section-stories" / split / f"{story}-story.csv").write_text(
            "section,text\n" + "".join(f'{n},"{t}"\n' for n, t in sections))
        long = "because it was very tired after the long day of walking through the deep dark forest"
        rows = [f"1,local,1,setting,,Where did the {animal} live?,explicit,in the forest,,,explicit,by the river,,",
                f"1,local,2,action,,What did the {animal} find?,explicit,a golden key,,,,,,",
                f"2,local,3,action,,Why did the {animal} go home?,implicit,{long},,,,,,"]
        (base / "questions" / split / f"{story}-questions.csv").write_text(header + "\n".join(rows) + "\n")
    return root / "fairytaleqa"


def mctest(root: Path) -> Path:
    """mc160 train (3 stories, answers beside) and test (1 story, answers in MCTestAnswers/);
    CRLF line ends, \\newline escapes, one:/multiple: prefixes."""
    folder = root / "mctest"
    (folder / "MCTest").mkdir(parents=True)
    (folder / "MCTestAnswers").mkdir()

    def story_line(sid: str, animal: str, colour: str) -> str:
        story = (f"The {animal} had a {colour} hat.\\newlineIt wore the hat every day.\\newline\\newline"
                 f"One day the {animal} lost the\\newlinehat in the snow.")
        qs = [f"one: What colour was the {animal}'s hat?\t{colour}\tgrey\tpink\tbrown",
              f"one: Where did the {animal} lose the hat?\tin the snow\tin the sea\tat school\tat home",
              f"multiple: How often did the {animal} wear the hat?\tnever\tevery day\tonce\ton Sundays",
              f"one: Who had a hat?\tthe {animal}\tthe cat\tthe dog\tnobody"]
        return f"{sid}\tAuthor: 1;Work Time(s): 1\t{story}\t" + "\t".join(qs)

    train = [story_line(f"mc160.train.{i}", ANIMALS[i], COLOURS[i]) for i in range(3)]
    (folder / "MCTest" / "mc160.train.tsv").write_bytes(("\r\n".join(train) + "\r\n").encode())
    (folder / "MCTest" / "mc160.train.ans").write_bytes(("A\tA\tB\tA\r\n" * 3).encode())
    (folder / "MCTest" / "mc160.test.tsv").write_bytes((story_line("mc160.test.0", "crow", "white") + "\r\n").encode())
    (folder / "MCTestAnswers" / "mc160.test.ans").write_bytes(b"A\tA\tB\tA\r\n")
    return folder


def race(root: Path) -> Path:
    """Five middle and two high articles, four questions each (two cloze)."""
    folder = root / "race"
    for level, count in (("middle", 5), ("high", 2)):
        (folder / "train" / level).mkdir(parents=True)
        for n in range(1, count + 1):
            animal = ANIMALS[n] if level == "middle" else ANIMALS[-n]
            doc = {"id": f"{level}{n}.txt",
                   "article": f"The {animal} of article {level} {n} likes apples. It sleeps in a tree. "
                              f"Its best friend is a {COLOURS[n]} bird.",
                   "questions": [f"The {animal} likes  _  .", "Where does it sleep?",
                                 f"_   is the {animal}'s best friend.", "What is the best title?"],
                   "options": [["apples", "pears", "nuts", "fish"],
                               ["In a tree", "In a cave", "In a house", "In a hole"],
                               [f"A {COLOURS[n]} bird", "A cat", "A dog", "A mouse"],
                               [f"The {animal}", "The moon", "The sea", "All of the above"]],
                   "answers": ["A", "A", "A", "A"]}
            (folder / "train" / level / f"{n}.txt").write_text(json.dumps(doc))
    return folder


def logiqa(root: Path) -> Path:
    """Eval.txt: six 8-line examples; one glues sentences, one has garbled option marks."""
    folder = root / "logiqa"
    folder.mkdir(parents=True)
    blocks = []
    for k in range(6):
        passage = f"All {ANIMALS[k]}s in the valley are {COLOURS[k]}.Some of them can swim."
        options = [f"A.Some {ANIMALS[k]}s are {COLOURS[k]}.", f"B.No {ANIMALS[k]} swims..",
                   f"C.Every {ANIMALS[k]} flies.", "D.The valley is empty."]
        if k == 1:
            options = [f"A No {ANIMALS[k]} is grey.", "b.Some swim.", f"Most of the {ANIMALS[k]}s on the C.S hill.",
                       "D? None of these."]
        blocks.append(["", "abcd"[k % 4], passage, "Which of the following must be true?", *options])
    (folder / "Eval.txt").write_text("\n".join(line for b in blocks for line in b))
    return folder


def aqua(root: Path) -> Path:
    """dev.json: six problems; plain numbers in one unit (open too), mixed units, a text option."""
    folder = root / "aqua"
    folder.mkdir(parents=True)
    rows = []
    for k in range(6):
        total = (k + 2) * 100 * (k + 1)
        rows.append({"question": f"A train of {k + 2} cars leaves town {ANIMALS[k]}. Each car holds {100 * (k + 1)} "
                                 f"people. How many people ride on the {ANIMALS[k]} train in total?",
                     "options": [f"{c})${v:,}" for c, v in zip("ABCDE", (total - 50, total, total + 50, total + 75,
                                                                          total + 100))],
                     "rationale": "multiply", "correct": "B"})
    rows[1]["options"] = ["A)1hours", "B)2hours", "C)3hours", "D)175 minutes", "E)60minutes"]
    rows[2]["options"] = ["A)12 million", "B)10 million", "C)14 million", "D)16 million", "E)18 million"]
    rows[3]["options"] = ["A)5", "B)6", "C)7", "D)8", "E)None of these"]
    rows[4]["options"] = ["A)10 m", "B)20 m", "C)30 m", "D)40 m", "E)50 m"]
    (folder / "dev.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


IRONY = {0: [f"plain tweet number {i} about the {ANIMALS[i % 8]}" for i in range(30)],
         1: [f"oh great, another {COLOURS[i % 8]} monday number {i}" for i in range(30)]}


def tweeteval(root: Path) -> Path:
    """datasets/irony (train, val, test; 60 tweets, 30 per label, and an empty one) and datasets/stance/abortion
    with the shared stance mapping.txt; the val split of stance has no text file."""
    folder = root / "tweeteval"
    irony = folder / "datasets" / "irony"
    irony.mkdir(parents=True)
    (irony / "mapping.txt").write_text("0\tnon_irony\n1\tirony")
    pairs = [(t, lab) for lab, texts in IRONY.items() for t in texts]
    train = [(" ", 1)] + pairs[0::3]  # an empty tweet, as hate/ has some
    for split, chunk in (("train", train), ("val", pairs[1::3]), ("test", pairs[2::3])):
        (irony / f"{split}_text.txt").write_text("".join(t + " \n" for t, _ in chunk))
        (irony / f"{split}_labels.txt").write_text("".join(f"{lab}\n" for _, lab in chunk))
    stance = folder / "datasets" / "stance"
    (stance / "abortion").mkdir(parents=True)
    (stance / "mapping.txt").write_text("0\tnone\n1\tagainst\n2\tfavor")
    texts = [f"stance tweet {i} on the matter" for i in range(24)]
    (stance / "abortion" / "train_text.txt").write_text("".join(t + "\n" for t in texts))
    (stance / "abortion" / "train_labels.txt").write_text("".join(f"{i % 3}\n" for i in range(24)))
    (stance / "abortion" / "val_labels.txt").write_text("0\n")
    return folder


ALL = {"qed": qed, "wikitablequestions": wikitablequestions, "fairytaleqa": fairytaleqa, "mctest": mctest,
       "race": race, "logiqa": logiqa, "aqua": aqua, "tweeteval": tweeteval}


def all_sources(root: Path) -> list[Path]:
    """Every tiny source folder, under root."""
    return [write(root) for write in ALL.values()]


def build_all(root: Path, **settings):
    """Build every tiny source (written under root/src) with these settings."""
    from insandbox.rl.data.build import build
    from insandbox.rl.data.settings import Settings

    src = root / "src"
    folders = all_sources(src) if not src.exists() else sorted(p for p in src.iterdir() if p.is_dir())
    return build(folders, Settings(**settings))
