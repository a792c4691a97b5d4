"""TweetEval: tweets with classification labels (emoji, emotion, hate, irony, offensive,
sentiment, stance towards five targets).

Layout: datasets/<task>/{train,val,test}_{text,labels}.txt with mapping.txt (stance:
datasets/stance/<target>/ and one stance/mapping.txt); a split whose text file is missing is
skipped. An item is a small group of tweets from one label set, one tweet a file, asked as:
  multi-choice   which files hold a tweet labelled L (at least one does, not all)
  single-choice  which file holds the one tweet labelled L
  open (number)  how many of the tweets are labelled L
The form is drawn per group (among the allowed qa_types) before the tweets are, so the group
can be composed to fit it. Tweets are used once; each label set gives at most
GROUPS_PER_LABEL_SET groups (the 100,000 emoji tweets would otherwise swamp the rest).
"""
from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..items import Form, Item, Part, PartRef, ReadOptions, Skips
from ..text import clean_document, one_line
from .reader import Reader, SourceError

SPLITS = ("train", "val", "test")
GROUP_SIZE = (4, 8)  # tweets per item, drawn uniformly
GROUPS_PER_LABEL_SET = 150
STANCE_TARGETS = {"abortion": "legal abortion", "atheism": "atheism", "climate": "action on climate change",
                  "feminist": "feminism", "hillary": "Hillary Clinton"}


def phrases(task: str, label: str, symbol: str = "") -> tuple[str, str]:
    """How questions name a label: (singular, plural) verb phrases, completing "a tweet that ..."
    and "how many of the tweets ...", e.g. ("is ironic", "are ironic")."""
    if task == "emoji":
        what = f"originally posted with the {symbol} emoji ({label.strip('_').replace('_', ' ')})"
        return f"was {what}", f"were {what}"
    if task == "emotion":
        return f"mainly expresses {label}", f"mainly express {label}"
    if task == "sentiment":
        return f"expresses a {label} sentiment", f"express a {label} sentiment"
    if task.startswith("stance-"):
        target = STANCE_TARGETS.get(task.removeprefix("stance-"), task.removeprefix("stance-"))
        stance = {"against": f"a stance against {target}", "favor": f"a stance in favour of {target}"}.get(
            label, f"no stance on {target}")
        return f"takes {stance}", f"take {stance}"
    negative = label.startswith(("not", "non"))
    adjective = {"hate": "hateful (hate speech against immigrants or women)", "irony": "ironic",
                 "offensive": "offensive"}.get(task, f"labelled {label}")
    if negative:
        adjective = "not " + adjective.split(" (")[0]
    return f"is {adjective}", f"are {adjective}"


@dataclass
class LabelSet:
    name: str  # "irony", "stance-abortion"
    folder: Path
    labels: list[tuple[str, str]]  # per label id: (name, symbol; the emoji itself, else "")


def _datasets_dir(folder: Path) -> Path:
    return folder / "datasets" if (folder / "datasets").is_dir() else folder


def _read_mapping(path: Path) -> list[tuple[str, str]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        cols = [c for c in line.split("\t") if c.strip()]
        if not cols:
            continue
        if not cols[0].strip().isdigit() or int(cols[0]) != len(out):
            raise SourceError(f"{path}: expected label ids 0, 1, ... in order, got {line!r}")
        out.append((cols[2].strip(), cols[1].strip()) if len(cols) >= 3 else (cols[1].strip(), ""))
    return out


def label_sets(folder: Path) -> list[LabelSet]:
    root = _datasets_dir(folder)
    found = []
    for task in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        if (task / "mapping.txt").is_file() and any(task.glob("*_text.txt")):
            found.append(LabelSet(task.name, task, _read_mapping(task / "mapping.txt")))
        elif (task / "mapping.txt").is_file():
            shared = _read_mapping(task / "mapping.txt")
            for target in sorted(p for p in task.iterdir() if p.is_dir() and any(p.glob("*_text.txt"))):
                found.append(LabelSet(f"{task.name}-{target.name}", target, shared))
    return found


def tweets(ls: LabelSet, skips: Skips) -> list[tuple[str, int, str, int]]:
    """(text as in the file, label id, split, line number) of every non-empty tweet of a label set."""
    out = []
    for split in SPLITS:
        text_path, label_path = ls.folder / f"{split}_text.txt", ls.folder / f"{split}_labels.txt"
        if not (text_path.is_file() and label_path.is_file()):
            continue
        texts = text_path.read_text(encoding="utf-8").replace("\r\n", "\n").split("\n")
        labels = label_path.read_text(encoding="utf-8").replace("\r\n", "\n").split("\n")
        for lines in (texts, labels):  # the final newline, not an empty tweet
            if lines and not lines[-1].strip():
                lines.pop()
        if len(texts) != len(labels):
            raise SourceError(f"{text_path}: {len(texts)} tweets but {len(labels)} labels")
        for n, (text, label) in enumerate(zip(texts, labels), 1):
            if not label.strip().isdigit():
                raise SourceError(f"{label_path}:{n}: {label!r} is not a label id")
            lid = int(label)
            if not 0 <= lid < len(ls.labels):
                raise SourceError(f"{label_path}:{n}: label {lid} is not in mapping.txt")
            if text.strip():
                out.append((text, lid, split, n))
            else:
                skips.add("empty tweet")
    return out


def _group(pools: dict[int, list], target: int, positives: int, size: int, rng: random.Random) -> Optional[list]:
    """`positives` tweets with the target label and size - positives with others, or None when
    the pools have run dry. Takes the tweets out of the pools."""
    others = [lid for lid in pools if lid != target]
    if len(pools[target]) < positives or sum(len(pools[o]) for o in others) < size - positives:
        return None
    chosen = [(pools[target].pop(), True) for _ in range(positives)]
    for _ in range(size - positives):
        nonempty = [o for o in others if pools[o]]
        chosen.append((pools[rng.choice(nonempty)].pop(), False))
    rng.shuffle(chosen)
    return chosen


def read(folder: Path, options: ReadOptions, skips: Skips) -> Iterator[Item]:
    rng = options.rng
    kinds = [k for k in ("multi-choice", "single-choice", "open") if k in options.qa_types]
    for ls in label_sets(folder):
        pools: dict[int, list] = {lid: [] for lid in range(len(ls.labels))}
        for tweet in tweets(ls, skips):
            pools[tweet[1]].append(tweet)
        for pool in pools.values():
            rng.shuffle(pool)
        made = 0
        while kinds and made < GROUPS_PER_LABEL_SET:
            kind = rng.choice(kinds)
            size = rng.randint(*GROUP_SIZE)
            target = rng.choice([lid for lid, pool in pools.items() if pool] or [0])
            positives = {"multi-choice": rng.randint(1, size - 1), "single-choice": 1,
                         "open": rng.randint(0, size)}[kind]
            group = _group(pools, target, positives, size, rng)
            if group is None:
                break
            name, symbol = ls.labels[target]
            singular, plural = phrases(ls.name, name, symbol)
            parts = [Part(clean_document(one_line(t[0]))) for t, _ in group]
            hits = [i for i, (_, hit) in enumerate(group) if hit]
            refs: list = [PartRef(i) for i in range(size)]
            form = {"multi-choice": Form("multi-choice", f"Which files hold a tweet that {singular}?",
                                         choices=refs, correct=hits),
                    "single-choice": Form("single-choice", f"Exactly one of the tweets {singular}. Which file "
                                          "holds it?", choices=refs, correct=hits),
                    "open": Form("open", f"How many of the {size} tweets {plural}?", answers=[str(len(hits))],
                                 answer_type="number")}[kind]
            made += 1
            yield Item(uid=f"{ls.name}-g{made}", context=f"{ls.name}/g{made}", parts=parts, forms=[form],
                       origin=", ".join(f"{ls.folder.name}/{t[2]}:{t[3]}" for t, _ in group))


READER = Reader(name="tweeteval", domain="social_media", material="tweet",
                layout="datasets/<task>/{train,val,test}_{text,labels}.txt with mapping.txt",
                recognise=lambda folder: bool(label_sets(folder)), read=read)
