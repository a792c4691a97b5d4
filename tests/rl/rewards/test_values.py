"""values.py: whether a math answer states one value or several, before math-verify reads it."""
from __future__ import annotations

import pytest

from insandbox.rl.rewards.values import not_arithmetic, several_values


@pytest.mark.parametrize("text", [
    "3", "-3", "2 - 3", "\\frac{6}{2}", "x = 3", "Area = 3", "x = y", "\\alpha = \\beta", "2\\pi", "3\\sqrt{2}",
    "2 \\frac{1}{2}", "(2, 3)", "\\{2, 3\\}", "\\max(2, 3)", "10^{3}", "1.5 \\times 10^{3}", "3 cm", "about 42",
    "42\\%", "$42$", "1,000", "Paris", "New York", "\\left(\\frac{1}{2}\\right)", "5!",
])
def test_one_value(text):
    assert several_values(text) is None


@pytest.mark.parametrize("text, why", [
    ("2 \\lor 3", "values joined by"), ("2 ∨ 3", "values joined by"), ("2 | 3", "values joined by"),
    ("2 或 3", "values joined by a connective"), ("2 oder 3", "values joined by a connective"),
    ("Lyon = Paris", "two texts joined by '='"), ("2 = 3", "a value on both sides"), ("x = 2 = 3", "2 equals signs"),
    ("2, 3", "several values separated by ','"), ("2; 3", "several values separated by ';'"),
    ("2 3", "two values side by side"), ("\\frac{1}{2} 3", "two values side by side"),
    ("3 cm 4", "a value after a word"), ("-13 y -6", "a value after a word"), ("\\pm 3", "± states two values"),
    ("**2 - 3**", "several numbers and '**'"), ("2 ( 3", "several numbers and 'an unclosed bracket'"),
    ("13% - 5", "several numbers and '%'"), ("-38 ~ -37.4", "values joined by '~'"),
    ("2\n- 3", "values joined by '\\n'"), ("16 _ -14", "values joined by '_'"),
])
def test_several_values(text, why):
    assert several_values(text).startswith(why), several_values(text)


def test_not_arithmetic_names_the_first_command_or_sign_that_is_not():
    assert not_arithmetic("\\frac{1}{2} + \\sqrt{2} \\cdot \\pi") is None
    assert not_arithmetic("\\alpha \\mid 3") == "\\mid"
    assert not_arithmetic("3 ≈ 2") == "≈"
