"""What offers several answers at once: separators by Unicode category, connectives in many languages.

An open answer that splits into two or more answers scores 0 in every strict mode (exact and
token F1): token F1 would otherwise pay a hedge as if it were one answer ("Paris oder Lyon": 0.5
for gold Paris and for gold Lyon). It splits at:

- separators, found by Unicode category rather than listed: every punctuation character (P*),
  every math, modifier or other symbol (Sm, Sk, So: "+", "->", "→", "=", "|", "∨", "~", an
  emoji), every control character (a line break, a tab), the line and paragraph separators and
  a combining mark that sits on no letter;
  except the marks that belong to a word or a number where they stand:
  - an apostrophe between two letters ("don't", "O'Brien"); a hyphen between a letter and a digit
    ("COVID-19"); a "^" before an exponent ("m^2"); a sign ("-3"); a comma or point between digits
    ("1,000", "3.5"). A hyphen between two words is a separator ("Paris-Lyon", where token F1
    would pay a hedge), and so between two digits (a range: "3-4");
  - a point, except one that ends a sentence (followed by a space and more text, after a word of
    four or more letters: "Paris. Lyon" is two answers, "St. Louis", "U.S. Army" and "Dr. Who"
    one), stands alone ("Paris . Lyon") or is an ellipsis ("Paris... Lyon");
  - quantity marks next to a number (a space between allowed): currency signs, "%", "‰", "°",
    primes ("$5", "42 %", "-4 °C"); elsewhere they separate ("Paris € Lyon");
- connectives, as whole words (case folded): or/and in English, German, French, Spanish,
  Italian, Portuguese, Catalan, the Nordic languages, Polish, Czech, Russian, Ukrainian, Greek,
  Turkish, Hungarian, Romanian, Finnish, Indonesian, Vietnamese, Hebrew, Arabic, Persian, Hindi,
  Korean, Latin and Esperanto ("oder", "ou", "o", "y", "или", "и", "또는", ...); and, written
  inside a word as those languages write them, the Chinese, Japanese and Thai ones that are
  never part of another word ("或", "或者", "还是", "または", "もしくは", "หรือ"); the Chinese and
  Japanese ones that are ("和", "与", "及", "と", "や") only as a word of their own.

An answer that equals a reference once normalised is that reference, never a hedge ("Jean-Paul
Sartre" for "Jean Paul Sartre"; open_answer.py checks that first). A part counts only when it
says something (normalises to a word: "The" or "..." alone is no answer), so enclosing quotes and
brackets, a trailing point and markdown stars split nothing ("**Paris**", "«Paris»", "Paris.").
A separator or connective that a reference itself holds is allowed for that row, by class: every
dash is one class, every quote, every bracket, every line break, every "or" and every "and"
("salt and pepper" allows "salt & pepper"; "AT&T" allows "&").
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Optional

from .characters import DASHES, MINUS

# connectives, by class; whole words (case folded)
_OR_WORDS = (
    "or", "either", "versus", "vs", "oder", "bzw", "beziehungsweise", "ou", "o", "ó", "u", "oppure", "ovvero",
    "eller", "ofwel", "lub", "albo", "czy", "nebo", "anebo", "alebo", "или", "либо", "або", "чи", "ή", "veya",
    "yahut", "yoksa", "vagy", "sau", "ori", "tai", "atau", "hoặc", "vel", "aut", "aŭ", "או", "أو", "او", "یا",
    "या", "अथवा", "또는", "혹은", "아니면", "หรือ", "或", "或者", "还是", "還是", "または", "又は", "もしくは",
    "若しくは", "あるいは", "或いは",
)
_AND_WORDS = (
    "and", "nor", "und", "sowie", "et", "y", "e", "ed", "i", "och", "og", "oraz", "и", "й", "та", "і", "και",
    "ve", "és", "și", "ja", "dan", "và", "atque", "kaj", "ו", "و", "और", "तथा", "एवं", "그리고", "및", "และ",
    "和", "与", "與", "及", "以及", "跟", "と", "や", "および", "及び", "並びに", "ならびに",
)
# written inside a word (no spaces in these scripts) and never part of another word
INSIDE_WORDS = {"或", "或者", "还是", "還是", "または", "又は", "もしくは", "若しくは", "あるいは", "或いは", "หรือ",
                 "และ", "以及", "および", "及び", "並びに", "ならびに"}
CONNECTIVE_CLASS = {w: "or" for w in _OR_WORDS} | {w: "and" for w in _AND_WORDS}
_LONGEST_FIRST = sorted(CONNECTIVE_CLASS, key=len, reverse=True)
_CONNECTIVE = re.compile("|".join(re.escape(w) for w in _LONGEST_FIRST))

_CLASSES = {"-": "dash", **{d: "dash" for d in DASHES}, "'": "quote", '"': "quote", "`": "quote",
            ",": ",", "、": ",", "،": ",", ";": ";", "؛": ";", "/": "/", "\\": "/", "。": ".", ".": ".",
            "|": "or", "∨": "or", "&": "and", "+": "and", "∧": "and"}
_QUANTITY_MARKS = {"%", "‰", "‱", "°", "′", "″", "‴"}
_APOSTROPHES = {"'", "\u2019"}
_HYPHENS = {"-", "\u2010"}
_JOIN_DIGITS = {",", "."}


def _is_letter(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LM"


def _is_alnum(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LMN"


def _is_boundary(ch: str) -> bool:
    """Where a word ends: the edge of the text, a space or any separator-like character."""
    return not ch or unicodedata.category(ch)[0] in "PSZC"


def char_class(ch: str) -> str:
    """The class a separator belongs to (a reference holding one allows them all)."""
    if ch in _CLASSES:
        return _CLASSES[ch]
    category = unicodedata.category(ch)
    if category == "Pd":
        return "dash"
    if category in ("Pi", "Pf"):
        return "quote"
    if category in ("Ps", "Pe"):
        return "bracket"
    if category[0] == "C" or category in ("Zl", "Zp"):
        return "line break"
    return ch


def _sentence_end(text: str, i: int) -> bool:
    """The last point of a run of points followed by a space and more text, where the run is an
    ellipsis, stands alone or follows a word of four or more letters."""
    if not (i + 1 < len(text) and text[i + 1].isspace() and text[i + 1:].strip()):
        return False
    first = i
    while first > 0 and text[first - 1] == ".":
        first -= 1
    if i > first or (first and text[first - 1].isspace()):
        return True
    start = first
    while start > 0 and _is_letter(text[start - 1]):
        start -= 1
    return first - start >= 4 and (start == 0 or text[start - 1] != ".")


def _next_to_a_number(text: str, i: int) -> bool:
    """A digit right before or after text[i], or one space away."""
    near = text[max(0, i - 2):i].rstrip()[-1:] + text[i + 1:i + 3].lstrip()[:1]
    return any(ch.isdigit() for ch in near)


def _separates(text: str, i: int) -> bool:
    """Whether text[i] separates answers where it stands (see the module docstring)."""
    ch = text[i]
    category = unicodedata.category(ch)
    if category[0] == "M":  # a combining mark on nothing ("‗" is a space and a low line) is a symbol
        return i == 0 or not _is_alnum(text[i - 1]) and unicodedata.category(text[i - 1])[0] != "M"
    if category[0] not in "PSC" and category not in ("Zl", "Zp"):
        return False
    before, after = text[i - 1] if i else "", text[i + 1] if i + 1 < len(text) else ""
    if category == "Sc" or ch in _QUANTITY_MARKS:
        return not _next_to_a_number(text, i)
    if ch == "-" and MINUS.match(text, i):
        return False
    if ch in _APOSTROPHES and before and after and _is_letter(before) and _is_letter(after):
        return False
    if ch in _HYPHENS and before and after and _is_alnum(before) and _is_alnum(after) \
            and before.isdigit() != after.isdigit():
        return False
    if ch == "^" and before and after and _is_alnum(before) and (after.isdigit() or after in "-+{"):
        return False
    if ch in _JOIN_DIGITS and before.isdigit() and after.isdigit():
        return False
    if ch == ".":
        return _sentence_end(text, i)
    return True


def _connectives(folded: str) -> list[tuple[int, int, str]]:
    """(start, end, class) of every connective in case-folded text."""
    found = []
    for m in _CONNECTIVE.finditer(folded):
        word = m.group(0)
        before, after = folded[m.start() - 1] if m.start() else "", folded[m.end()] if m.end() < len(folded) else ""
        if word in INSIDE_WORDS or (_is_boundary(before) and _is_boundary(after)):
            found.append((m.start(), m.end(), CONNECTIVE_CLASS[word]))
    return found


def _fold_in_place(text: str) -> str:
    """Lower case, one character for one (so positions stay those of the text)."""
    return "".join(low if len(low := ch.lower()) == 1 else ch for ch in text)


def connectives_in(text: str) -> list[str]:
    """The connectives the text holds (lower case), in order."""
    folded = _fold_in_place(text)
    return [folded[start:end] for start, end, _ in _connectives(folded)]


def without_connectives(text: str) -> tuple[str, set[str]]:
    """(the text with every connective blanked out, the classes of those connectives)."""
    spans = _connectives(_fold_in_place(text))
    for start, end, _ in spans:
        text = text[:start] + " " * (end - start) + text[end:]
    return text, {kind for _, _, kind in spans}


def _splits(text: str) -> list[tuple[int, int, str]]:
    """(start, end, class) of every separator and connective."""
    folded = _fold_in_place(text)
    spans = [(i, i + 1, char_class(text[i])) for i in range(len(text)) if _separates(text, i)]
    return sorted(spans + _connectives(folded))


def split_answers(text: str, allowed: set[str], says_something: Callable[[str], bool]) -> tuple[list[str], list[str]]:
    """(the parts that say something, the classes split at) of text split at every separator and
    connective whose class is not in `allowed`."""
    parts, classes, start = [], [], 0
    for begin, end, kind in _splits(text):
        if kind in allowed or begin < start:
            continue
        parts.append(text[start:begin])
        classes.append(kind)
        start = end
    parts.append(text[start:])
    return [p.strip() for p in parts if says_something(p)], classes


def classes_in(text: str) -> set[str]:
    """The classes of every separator-like character and connective the text holds, wherever it stands."""
    marks = {char_class(ch) for ch in text if unicodedata.category(ch)[0] in "PSC" or unicodedata.category(ch)
             in ("Zl", "Zp")}
    return marks | {kind for _, _, kind in _connectives(_fold_in_place(text))}


def alternatives(text: str, references: list[str],
                 says_something: Callable[[str], bool]) -> Optional[tuple[str, list[str]]]:
    """(what split it, the answers) when the text offers two or more answers; None otherwise."""
    allowed = set().union(*(classes_in(ref) for ref in references)) if references else set()
    parts, classes = split_answers(text, allowed, says_something)
    if len(parts) > 1:
        return ", ".join(dict.fromkeys(repr(c) if len(c) == 1 else c for c in classes)), parts
    return None
