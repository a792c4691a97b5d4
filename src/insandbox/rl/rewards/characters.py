"""One form for every character that can be written several ways: what every reader sees first.

`clean` is applied to the answer and to every reference before any scorer reads them (choice
letters, numbers, open text, the paper preset), so a sign, a digit or a letter means the same to
all of them. A reader that read a character one way while another read it the other way was how
`–3` (en dash) paid for gold 3 and for gold -3. In order:

- invisible characters go: format characters (Unicode category Cf: zero-width space and joiners,
  word joiner, byte-order mark, soft hyphen, direction marks), the other default-ignorable ones
  (variation selectors such as the emoji selector U+FE0F, the combining grapheme joiner, Hangul
  fillers, tag characters) and an emoji's skin-tone modifier: "Paris\\ufe0f" is "Paris";
- digit groups join: digits in groups of three after a thin space, narrow or plain no-break
  space, figure or punctuation space, apostrophe or underscore ("1 000", "1'000", "1_000" are
  "1000"); every separator of one number the same, the first group 1-3 digits. A plain space
  does not join: "1 000" with an ASCII space is two numbers;
- superscripts and subscripts right after a digit or a closing bracket are a power and an index,
  never more digits: "2²" is "2^2" (4, not 22), "10⁻³" is "10^{-3}", "10₂" is "10_2" (an index,
  never "102"); elsewhere they are plain digits ("m²" is "m2", "H₂O" is "H2O");
- vulgar fractions are a fraction: "½" is "1/2", "1½" is "3/2" (a whole number right before one
  makes a mixed number; "1 ½", with a space, stays two numbers); the fraction slash (U+2044) and
  the division slash (U+2215) are "/";
- NFKC folds compatibility forms (full-width "Ａ" and "１２", mathematical bold letters, circled
  digits), and every decimal digit of any script becomes its ASCII digit (Arabic-Indic "٤٢",
  Devanagari "४२" are "42"; the Arabic decimal and thousands separators and percent sign are
  ".", "," and "%"). Digits that are not decimal digits (Han numerals, Roman numeral letters)
  stay words;
- minus signs are "-": U+2212 and its superscript, subscript, heavy and modifier forms always
  (and a space after one, before a digit, goes: "− 3" is "-3"); a dash or hyphen (figure dash, en
  and em dash, horizontal bar, U+2010/U+2011 hyphens, the small and full-width forms) only right
  before a digit ("–3", "‐3" are "-3"; "Paris – Lyon" keeps its dash). Whether a "-" is a sign is
  then one rule for every reader (MINUS below): it stands right before a digit and not after a
  letter, digit or point ("x = -3", "(-3)"; "1990-1995" is a range, "COVID-19" a name); "- 3",
  with a space, is a list bullet, not a sign;
- the Turkish dotted capital "İ" is "I" (and a dot above on i or j goes), so that case folding
  makes "İSTANBUL" "istanbul" as it makes "ISTANBUL".

Clean text stays clean: clean(clean(x)) == clean(x).
"""
from __future__ import annotations

import re
import unicodedata

# the default-ignorable code points that are not format characters (Cf goes by category)
_IGNORABLE = re.compile("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0"
                        "\U000e0000-\U000e0fff]")
# a skin-tone modifier changes the emoji before it; alone, it is a symbol of its own
_EMOJI_MODIFIER = re.compile("(?<=[\u2600-\u27bf\U0001f000-\U0001faff])[\U0001f3fb-\U0001f3ff]")
_DIGIT_GROUP_SEPARATORS = "\u2009\u200a\u202f\u00a0\u2007\u2008\u2006'\u2019\u02bc_"
_DIGIT_GROUPS = re.compile(rf"(?<![\d.,])\d{{1,3}}(?P<sep>[{_DIGIT_GROUP_SEPARATORS}])\d{{3}}"
                           rf"(?:(?P=sep)\d{{3}})*(?!\d|(?P=sep)\d)")
_SUPERSCRIPTS = {"⁰": "0", "¹": "1", "²": "2", "³": "3", "⁴": "4", "⁵": "5", "⁶": "6", "⁷": "7", "⁸": "8",
                 "⁹": "9", "⁺": "+", "⁻": "-"}
_SUBSCRIPTS = {chr(0x2080 + i): str(i) for i in range(10)} | {"₊": "+", "₋": "-"}
_AFTER_A_VALUE = r"(?<=[\d)\]}])"
_POWER = re.compile(_AFTER_A_VALUE + "([⁺⁻]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)")
_INDEX = re.compile(_AFTER_A_VALUE + "([₊₋]?[₀-₉]+)")
# ½ -> (1, 2), built from the characters' own decompositions ("1⁄2")
_VULGAR = {}
for _code in list(range(0xBC, 0xBF)) + list(range(0x2150, 0x215F)) + [0x2189]:
    _num, _, _den = unicodedata.normalize("NFKC", chr(_code)).partition("\u2044")
    _VULGAR[chr(_code)] = (int(_num), int(_den))
_FRACTION = re.compile(r"(\d*)([" + "".join(_VULGAR) + "])")
_SLASHES = str.maketrans({"\u2044": "/", "\u2215": "/"})
_ARABIC = {"\u066b": ".", "\u066c": ",", "\u066a": "%"}  # decimal separator, thousands separator, percent sign
# minus signs (after NFKC: U+207B and U+208B are U+2212 by then)
_MINUS_SIGNS = "\u2212\u2796\u02d7"
_MINUS_SIGN = re.compile(rf"[{_MINUS_SIGNS}](?:[ \t]+(?=\.?\d))?")
# dashes that mean minus right before a digit (after NFKC: U+2011 is U+2010, the small forms are these)
DASHES = "\u2010\u2012\u2013\u2014\u2015\u2e3a\u2e3b"
_DASH_BEFORE_A_DIGIT = re.compile(rf"[{DASHES}](?=\.?\d)")
_DOT_ABOVE = re.compile("(?<=[IiJj])\u0307")
# a "-" that is a sign: before a digit, not after a letter, a digit or a point (one rule for every reader)
MINUS = re.compile(r"(?<![\w.])-(?=\.?\d)")


def _plain(run: str, table: dict[str, str]) -> str:
    return "".join(table[ch] for ch in run)


def _power(m: re.Match) -> str:
    exponent = _plain(m.group(1), _SUPERSCRIPTS)
    return "^" + (exponent if exponent.isdigit() else "{" + exponent + "}")  # "10^{-3}": LaTeX reads the sign


def _fraction(m: re.Match) -> str:
    num, den = _VULGAR[m.group(2)]
    whole = int(m.group(1)) if m.group(1) else 0
    return f"{whole * den + num}/{den}"


def _ascii_digit(ch: str) -> str:
    if ch.isascii():
        return ch
    if ch in _ARABIC:
        return _ARABIC[ch]
    digit = unicodedata.decimal(ch, None)
    return str(digit) if digit is not None else ch


def clean(text: str) -> str:
    """The text every reader reads: see the module's docstring."""
    text = _IGNORABLE.sub("", "".join(ch for ch in text if unicodedata.category(ch) != "Cf"))
    text = _EMOJI_MODIFIER.sub("", text)
    text = _DIGIT_GROUPS.sub(lambda m: m.group(0).replace(m.group("sep"), ""), text)
    text = _POWER.sub(_power, text)
    text = _INDEX.sub(lambda m: "_" + _plain(m.group(1), _SUBSCRIPTS), text)
    text = _FRACTION.sub(_fraction, text)
    text = unicodedata.normalize("NFKC", text).translate(_SLASHES)
    text = "".join(_ascii_digit(ch) for ch in text)
    text = _MINUS_SIGN.sub("-", text)
    text = _DASH_BEFORE_A_DIGIT.sub("-", text)
    return _DOT_ABOVE.sub("", text.replace("\u0130", "I"))
