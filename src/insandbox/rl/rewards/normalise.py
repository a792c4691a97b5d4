"""SQuAD-style answer normalisation and tokens, made safe for numbers and non-English text.

SQuAD lower-cases, drops ASCII punctuation and the articles a/an/the, and splits on whitespace.
Here, in addition:
- Unicode first: NFKC (full-width "１２" is "12"), casefold ("Straße" is "strasse"), every
  Unicode punctuation character dropped (「」, ¿, —), accents kept ("résumé" is not "resume");
- punctuation becomes a space, so "New-York" equals "New York" (SQuAD would make it "newyork"),
  except periods and apostrophes, which go as in SQuAD ("U.S.A." is "usa", "don't" is "dont");
- numbers survive punctuation: "3.5" stays "3.5" (not "35"), "1,000" becomes "1000" (a thousands
  comma; "1,5" stays "1,5", no locale is guessed), "-4" keeps its sign and "−4" (U+2212) is "-4";
- each Han, kana or other CJK ideograph is its own token, so token F1 works on text written without
  spaces (as multilingual SQuAD evaluations do).

Every text is cleaned first (characters.py: the one form of signs, digits, invisible characters
and the Turkish dotted I that every reader shares), then case folded.
"""
from __future__ import annotations

import re
import string
import unicodedata

from .characters import MINUS, clean

_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_DECIMAL_POINT = re.compile(r"(?<=\d)\.(?=\d)|(?<![\w.])\.(?=\d)")  # "3.5", ".5"
_DECIMAL_COMMA = re.compile(r"(?<=\d),(?=\d)")
# private-use stand-ins for what punctuation inside numbers means, while punctuation goes
_KEEP = {".": "\uE000", ",": "\uE001", "-": "\uE002"}
_DELETED = {".", "'", "\u2019", "\u02bc"}  # periods and apostrophes join what they separate
_ASCII_PUNCTUATION = set(string.punctuation)
# ideographs and kana: written without spaces, one token each
_CJK = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f])")


def _is_punctuation(ch: str) -> bool:
    return ch in _ASCII_PUNCTUATION or unicodedata.category(ch).startswith("P")


def normalise(text: str, drop_articles: bool = True) -> str:
    text = clean(text).casefold()
    text = _THOUSANDS.sub("", text)
    text = _DECIMAL_POINT.sub(_KEEP["."], text)
    text = _DECIMAL_COMMA.sub(_KEEP[","], text)
    text = MINUS.sub(_KEEP["-"], text)
    text = "".join(("" if ch in _DELETED else " ") if _is_punctuation(ch) else ch for ch in text)
    for mark, stand_in in _KEEP.items():
        text = text.replace(stand_in, mark)
    if drop_articles:
        text = _ARTICLES.sub(" ", text)
    return " ".join(tokens_of_normalised(text))


def tokens_of_normalised(text: str) -> list[str]:
    return _CJK.sub(r" \1 ", text).split()


def tokens(text: str) -> list[str]:
    return normalise(text).split()
