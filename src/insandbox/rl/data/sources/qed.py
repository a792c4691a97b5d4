"""QED (Natural Questions with explanations): one Wikipedia paragraph and an open question.

Layout: qed-*.jsonlines (one JSON object a line). The gold answer is QED's annotated span; the
other Natural Questions spans are aliases. Rows whose explanation_type is "none" have no answer
the paragraph supports and are skipped. Passages are tokenised; they and the answers are
detokenised alike, and the tokenised answer forms stay as aliases.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from ..items import Form, Item, Part, ReadOptions, Skips
from ..text import clean_document, dedupe, detokenise, one_line, sentence_case, slug
from .reader import Reader, SourceError


def _files(folder: Path) -> list[Path]:
    return sorted(folder.glob("qed-*.jsonlines"))


def _answers(row: dict) -> list[str]:
    """Accepted answers, tokenised as in the source: QED's own span(s) first, then each NQ answer
    (a multi-span answer is its spans joined with ", "); single spans before joined ones."""
    spans = [a["paragraph_reference"]["string"] for a in row["annotation"].get("answer", [])]
    candidates = [spans] if spans else []
    candidates += [[s["string"] for s in ans] for ans in row.get("original_nq_answers", [])]
    single = [c[0] for c in candidates if len(c) == 1]
    joined = [", ".join(c) for c in candidates if len(c) > 1]
    return [one_line(a) for a in single + joined]


def read(folder: Path, options: ReadOptions, skips: Skips) -> Iterator[Item]:
    for path in _files(folder):
        split = path.stem.removeprefix("qed-")
        with path.open(encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as e:
                    raise SourceError(f"{path}:{n}: not JSON ({e})") from None
                if row.get("annotation", {}).get("explanation_type") == "none":
                    skips.add("no supported answer (explanation_type none)")
                    continue
                raw = _answers(row)
                if not raw:
                    skips.add("no answer")
                    continue
                answers = dedupe([detokenise(a) for a in raw] + raw)
                paragraph = detokenise(row["paragraph_text"])
                # example ids are signed: "n" keeps -5 apart from 5 in an id made of [A-Za-z0-9._-]
                example = slug(str(row["example_id"]).replace("-", "n"))
                yield Item(uid=f"{split}-{example}", context=paragraph,
                           parts=[Part(clean_document(paragraph))],
                           forms=[Form("open", sentence_case(row["question_text"]).rstrip("?") + "?", answers=answers)],
                           origin=f"{path.name}:{n}")


READER = Reader(name="qed", domain="encyclopedia", material="Wikipedia paragraph", layout="qed-*.jsonlines",
                recognise=lambda folder: bool(_files(folder)), read=read)
