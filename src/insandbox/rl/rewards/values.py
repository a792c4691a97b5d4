"""Whether a math answer states one value or several, before math-verify reads it.

math-verify reads what it can and drops the rest: "2 \\mid 3", "2 \\to 3", "2 ∨ 3", "2 | 3",
"2 — 3", "2 = 3" and "Lyon = Paris" are all read as their last value, so a hedge would pay in
full for one of its values. So nothing reaches math-verify that states several values:

- a connective, as a word in any language the open answers know (hedges.py) or as a sign or
  LaTeX command (\\lor, \\vee, \\cup, ∨, ∪, |, \\mid, \\to, →, \\sim, ≈, ...): anything between
  two values that is not arithmetic is one;
- "±" or "∓" (\\pm, \\mp): two values at once;
- two values side by side: a number right after another value ("2 3", "\\frac{1}{2} 3",
  "2 \\quad 3", "(2)3"); any value after a word that followed a value ("3 cm 4", "-13 y -6",
  "5 m^2": a unit ends the answer). A number before a command is a product, as written ("2\\pi",
  "3\\sqrt{2}", "2 \\frac{1}{2}", which math-verify reads as 2.5);
- a separator between values at the top level (",", ";", a line break in LaTeX, "\\\\");
  inside brackets a comma separates a tuple's or a function's arguments, which math-verify
  compares whole;
- "=" more than once, after a number ("2 = 3"), or between two texts without a number, unless
  its left side is one letter ("x = y"): "x = 3" and "Area = 3" state one value;
- two or more numbers with anything math-verify does not read as arithmetic (markdown stars
  "**2 - 3**", an unclosed bracket "2 ( 3", a percent sign with more after it "13% - 5", a line
  break): math-verify then reads only a part, its last value.

Arithmetic is +, -, *, /, ^, _, ×, ÷, ·, !, %, °, primes, brackets and the LaTeX commands in
the sets below. `not_arithmetic` also names any other command or sign: the strict number reader
refuses those, the paper preset lets them through (the official reward does) once they state
one value.
"""
from __future__ import annotations

import re
from typing import Optional

from .hedges import connectives_in

_SPACING = re.compile(r"\\(?:left|right|[bB]igg?[lr]?|displaystyle|textstyle|quad|qquad|[,;:! ])(?![A-Za-z])")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_TOKEN = re.compile(r"\\[A-Za-z]+|\\.|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|\.\d+|[^\W\d_]+|\*\*|__|[ \t]+|.", re.S)
_GREEK = ("alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi rho sigma "
          "varsigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi Psi Omega")
_ARGUMENTS = {"frac": 2, "dfrac": 2, "tfrac": 2, "cfrac": 2, "binom": 2, "dbinom": 2, "tbinom": 2, "sqrt": 1,
              "boxed": 1, "text": 1, "textrm": 1, "textbf": 1, "textit": 1, "mathrm": 1, "mathbf": 1, "mathit": 1,
              "mbox": 1, "operatorname": 1, "overline": 1}
_VALUES = set(_GREEK.split()) | {"pi", "infty", "circ", "degree", "e"}
_FUNCTIONS = set("sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh log ln lg exp min max gcd lcm det"
                 .split())
_OPERATORS = {"cdot", "times", "div", "ast"}
_OPERATOR_SIGNS = set("+-*/^_×÷·⋅")
_POSTFIX = {"!", "'", "%", "°", "\\%"}
_OPEN, _CLOSE = set("([{") | {"\\{"}, set(")]}") | {"\\}"}
_IGNORED = {"$", "\\$"}
_SEVERAL_SIGNS = re.compile(r"[±∓]|\\(?:pm|mp)(?![A-Za-z])")


def _tokens(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(_THOUSANDS.sub("", _SPACING.sub(" ", text))) if t not in _IGNORED]


def _kind(token: str) -> str:
    if token[0].isdigit() or (token[0] == "." and len(token) > 1):
        return "number"
    if token.startswith("\\") and token[1:].isalpha():
        name = token[1:]
        if name in _ARGUMENTS:
            return "command"
        if name in _VALUES:
            return "value"
        if name in _FUNCTIONS or name in _OPERATORS:
            return "operator"
        return "junk"
    if token in _POSTFIX:
        return "postfix"
    if token in _OPEN:
        return "open"
    if token in _CLOSE:
        return "close"
    if token in _OPERATOR_SIGNS:
        return "operator"
    if token.isspace():
        return "space" if token.strip(" \t") == "" else "junk"  # a line break between values is a separator
    if token[0].isalpha():
        return "word"
    return "junk"


def _side_by_side(tokens: list[str]) -> Optional[str]:
    """Why the tokens state several values, if they do (see the module docstring)."""
    previous = None  # "value", "word" (before any value), "unit" (a word after a value), "command", "operator"
    seen, junk, unit, depth = False, None, None, 0
    for token in tokens:
        kind = _kind(token)
        if kind == "space":
            continue
        if kind == "open":
            depth += 1
        elif kind == "close":
            depth = max(0, depth - 1)
        if token in (",", ";") and depth:
            kind = "operator"  # a tuple's or a function's arguments
        if token == "_" and previous == "value":
            kind = "junk"  # an index on a number ("16_{-14}") is no arithmetic
        if kind == "junk":
            if seen and junk is None:
                junk = token
            previous = "junk"
            continue
        starts_a_value = kind in ("number", "value", "command", "open")
        if starts_a_value or kind == "word":
            if junk is not None:
                return f"values joined by {junk!r}"
            if unit and starts_a_value:
                return f"a value after a word that followed one ({unit!r}, then {token!r})"
            if previous == "value" and kind == "number":
                return f"two values side by side ({token!r})"
        if kind == "command":
            previous = "command"
        elif kind in ("number", "value", "close", "postfix"):
            previous = "value"
        elif kind == "word":
            previous = "unit" if previous in ("value", "unit") else "word"
            unit = unit or (token if previous == "unit" else None)
        else:
            previous = "operator"
        seen = seen or kind in ("number", "value", "command", "word")
    return None


def _equation(text: str) -> tuple[Optional[str], str]:
    """(why "=" makes several values, or None; the side that states the value)."""
    sides = text.split("=")
    if len(sides) == 1:
        return None, text
    if len(sides) > 2:
        return f"{len(sides) - 1} equals signs", text
    left, right = sides[0].strip(), sides[1].strip()
    if any(ch.isdigit() for ch in left):
        return "a value on both sides of '='", text
    variable = re.fullmatch(r"\\?[^\W\d_]+(?:_\{?\w+\}?)?'*", left) is not None
    if not any(ch.isdigit() for ch in right) and not (variable and len(left.lstrip("\\")) <= 1) \
            and left.lstrip("\\") not in _VALUES:
        return "two texts joined by '='", text
    return None, right


def several_values(text: str) -> Optional[str]:
    """Why the text states several values, or None when it states at most one."""
    if _SEVERAL_SIGNS.search(text):
        return "± states two values"
    words = [w for w in connectives_in(text) if len(w) > 1 or not w.isascii()]
    if words:
        return f"values joined by a connective ({', '.join(dict.fromkeys(words))})"
    why, side = _equation(text)
    if why:
        return why
    tokens = _tokens(side)
    depth, unread = 0, []
    for token in tokens:
        depth += (token in _OPEN) - (token in _CLOSE)
        if token in (",", ";"):
            if depth <= 0:
                return f"several values separated by {token!r}"
        elif _kind(token) == "junk":
            unread.append(token)
    several = _side_by_side(tokens)
    if several:
        return several
    numbers = [t for t in tokens if _kind(t) == "number"]
    unread += _inner_percent(tokens) + (["an unclosed bracket"] if depth else [])
    if len(numbers) > 1 and unread:  # math-verify reads such text in part: its last value
        return f"several numbers and {unread[0]!r}, which is not arithmetic"
    return None


def _inner_percent(tokens: list[str]) -> list[str]:
    """A percent sign with more than closing brackets after it ("13% - 5": not arithmetic)."""
    for i, token in enumerate(tokens):
        if token in ("%", "\\%") and any(_kind(t) not in ("space", "close") for t in tokens[i + 1:]):
            return [token]
    return []


def not_arithmetic(text: str) -> Optional[str]:
    """The first command or sign that is not arithmetic, or None."""
    for token in _tokens(text.replace("=", " ")):
        if _kind(token) == "junk":
            return token
    return None
