"""Small text helpers the readers and the builder share: cleaning, numbers, comparisons, ids."""
from __future__ import annotations

import functools
import re
import string
from typing import Optional

_SPACES = re.compile(r"[ \t\f\v\u00a0]+")


def clean_document(text: str) -> str:
    """A document as it goes into a file: Unix line ends, no trailing blanks, one final newline."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = [line.rstrip() for line in text.split("\n")]
    return "\n".join(lines).strip("\n") + "\n"


def one_line(text: str) -> str:
    """Questions and options on one line: every run of whitespace becomes one space."""
    return " ".join(text.split())


def tidy_question(text: str) -> str:
    """One line, without the stray full stops some sources leave after the end ("driving?.",
    "likes _ .   .", "activity..")."""
    text = re.sub(r"([.?!])(?:\s+\.)+(?=\s|$)", r"\1", one_line(text))  # ". ." but not an ellipsis
    text = re.sub(r"(?<!\.)\.\.(?=\s|$)", ".", text)
    return re.sub(r"([?!])\.(?=\s|$)", r"\1", text)


def sentence_case(text: str) -> str:
    """One line, its first letter upper case (search-style questions are all lower case)."""
    text = one_line(text)
    return text[:1].upper() + text[1:]


# Natural Questions passages are tokenised ("Destiny 's Child", "Ste . Marie , Ontario");
# undo the common cases so the files read like prose and answers read like the files
_DETOKENISE = [
    (re.compile(r" ([,.;:?!%])(?=\s|$)"), r"\1"),
    (re.compile(r" (['’](?:s|S|re|ve|ll|d|m)|n't)\b"), r"\1"),
    (re.compile(r"([(\[]) "), r"\1"),
    (re.compile(r" ([)\]])"), r"\1"),
    (re.compile(r" -- "), " – "),
    (re.compile(r"(?<=\w) - (?=\w)"), "-"),
    (re.compile(r"\$ (?=\d)"), "$"),
]


def detokenise(text: str) -> str:
    for pattern, repl in _DETOKENISE:
        text = pattern.sub(repl, text)
    return text


_NUMBER = re.compile(r"[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+−]?\.\d+|[-+−]?\d+/\d+")


def parse_number(text: str) -> Optional[str]:
    """The canonical form of a plain number ("12,467" -> "12467", "−3" -> "-3", "3/4"), or None
    when the text is not just a number (dates, ranges, numbers with words)."""
    text = text.strip()
    if not _NUMBER.fullmatch(text):
        return None
    text = text.replace(",", "").replace("−", "-").lstrip("+")
    return "0" + text if text.startswith(".") else text.replace("-.", "-0.")


_CURRENCY = re.compile(r"^(?:rs\.?|inr|usd|\$|£|€)\s*", re.I)
_SCALE_WORDS = {"hundred", "thousand", "million", "billion", "trillion", "lakh", "lakhs", "crore", "crores"}


def number_with_unit(text: str) -> Optional[tuple[str, str]]:
    """(canonical number, unit) of an option such as "$1,200", "Rs.16002", "100 m" or "50.25%";
    None when the text is not a number with at most a currency sign and a unit."""
    text = _CURRENCY.sub("", text.strip()).strip()
    m = re.match(r"([-+−]?[\d.,/]+)\s*(.*)$", text)
    if not m:
        return None
    value = parse_number(m.group(1))
    unit = m.group(2).strip().rstrip(".").lower()
    if value is None or len(unit) > 20 or not re.fullmatch(r"[a-z%° ]*", unit) or set(unit.split()) & _SCALE_WORDS:
        return None
    return value, unit


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation + "‘’“”–—")


def normalise_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces: how answers are compared when the
    builder checks for leaks and duplicates (the usual reading-comprehension normalisation)."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


@functools.lru_cache(maxsize=4096)
def _phrase_pattern(phrase: str) -> re.Pattern:
    return re.compile(r"(?<!\w)" + r"\s+".join(re.escape(w) for w in phrase.split()) + r"(?!\w)", re.I)


def contains_phrase(haystack: str, phrase: str) -> bool:
    """Whether `phrase` occurs in `haystack` as whole words, ignoring case and spacing."""
    return bool(phrase.split()) and _phrase_pattern(phrase).search(haystack) is not None


def slug(text: str) -> str:
    """An id part from any text: letters, digits, dot, dash and underscore only."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "x"


def dedupe(values: list[str]) -> list[str]:
    """Non-empty values in order, each kept once (ignoring case and spacing only: a scorer that
    compares less leniently still finds every form)."""
    seen: set[str] = set()
    out = []
    for v in values:
        key = " ".join(v.lower().split())
        if v.strip() and key not in seen:
            seen.add(key)
            out.append(v.strip())
    return out
