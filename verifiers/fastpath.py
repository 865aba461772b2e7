"""Exact comparison of plain numbers without sympy.

Most answers in arithmetic data are integers, decimals or simple fractions. For those, a bounded regex
and `fractions.Fraction` decide equality exactly, in microseconds, with nothing that can blow up: every
digit run is capped at 40 digits and exponents (`1e9`) are not accepted, so `Fraction` never builds a
huge integer. Anything else returns None and goes to the symbolic comparison.

Lists of plain numbers get the same treatment (`exact_structure`): sets (`\\{1,2\\}`) compare as sets,
bracketed lists compare in order and need the same brackets, which is how intervals (`[1,2)`,
`(-\\infty, 3]`) and tuples (`(1,2)`) are told apart; a bare list (`1, 2`, brackets left out) is a set
next to a set or another bare list, and the tuple it spells next to a parenthesised tuple (`1, 3` ==
`(1,3)`, `3, 1` != `(1,3)`), never a bracketed interval (`[1,3]`). The ANTLR LaTeX grammar spends tens of
milliseconds on such lists.

Rounding rule: a decimal is the exact rational it spells (`0.75` is 3/4, `1000.0` is 1000), and numbers
are equal only when they are the same rational. So `0.75 == 3/4` but `0.3333 != 1/3` and `0.33 != 1/3`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

from rlep.verifiers.normalize import Answer

_DIGITS = r"(?:\d{1,40}(?:\.\d{1,40})?|\.\d{1,40})"
_SIGNED = rf"[+-]?{_DIGITS}"
_NUMBER = re.compile(
    rf"""(?P<sign>[+-]?)\s*(?:
        (?P<plain>{_DIGITS})
      | \\frac\{{\s*(?P<num>{_SIGNED})\s*\}}\{{\s*(?P<den>{_SIGNED})\s*\}}
      | (?P<slash_num>{_DIGITS})\s*/\s*(?P<slash_den>{_DIGITS})
      | \(\s*(?P<whole>\d{{1,40}})\s*\+\s*\\frac\{{(?P<mixed_num>\d{{1,40}})\}}\{{(?P<mixed_den>\d{{1,40}})\}}\s*\)
    )""",
    re.VERBOSE,
)
_MAX_CHARS = 200


def exact_value(text: str) -> Fraction | None:
    """The exact rational written in normalised `text`, or None if it is not a plain number or fraction."""
    if len(text) > _MAX_CHARS:
        return None
    number = _NUMBER.fullmatch(text)
    if number is None:
        return None
    parts = number.groupdict()
    if parts["plain"] is not None:
        value = Fraction(parts["plain"])
    elif parts["whole"] is not None:
        value = int(parts["whole"]) + Fraction(int(parts["mixed_num"]), int(parts["mixed_den"]))
    else:
        numerator = parts["num"] if parts["num"] is not None else parts["slash_num"]
        denominator = parts["den"] if parts["den"] is not None else parts["slash_den"]
        if Fraction(denominator) == 0:
            return None
        value = Fraction(numerator) / Fraction(denominator)
    return -value if parts["sign"] == "-" else value


def exact_equal(gold: Answer, gold_value: Fraction, pred: Answer, pred_value: Fraction) -> bool:
    """Whether two plain-number answers are equal.

    When exactly one side carried a percent sign, it may be read as written or divided by 100
    (`50\\%` matches both 50 and 0.5); when both or neither did, the values must be equal.
    """
    if gold.percent == pred.percent:
        return gold_value == pred_value
    percent_value, plain_value = (gold_value, pred_value) if gold.percent else (pred_value, gold_value)
    return plain_value in (percent_value, percent_value / 100)


_INFINITY = {"\\infty": math.inf, "+\\infty": math.inf, "-\\infty": -math.inf}
_NESTING = re.compile(r"[()\[\]]")  # braces are fine: they belong to \frac


@dataclass(frozen=True, slots=True)
class Structure:
    """A list of plain numbers: a set (`\\{1,2\\}`), a bare list (`1, 2`) or a bracketed tuple/interval."""

    kind: str  # "set" (`\\{1,2\\}`), "list" (a bare `1, 2`) or "bracket"
    brackets: str  # the opening and closing bracket, e.g. "[)"; "" for sets and bare lists
    values: tuple


def exact_structure(text: str) -> Structure | None:
    """`text` as a Structure when every element is a plain number (or +-infinity at an interval end).

    Nested brackets, expressions and single bracketed numbers return None (the symbolic path decides).
    """
    if len(text) > 400:
        return None
    if text.startswith("\\{") and text.endswith("\\}"):
        kind, brackets, inner = "set", "", text[2:-2]
    elif text[:1] in "([" and text[-1:] in ")]":
        kind, brackets, inner = "bracket", text[0] + text[-1], text[1:-1]
    else:
        kind, brackets, inner = "list", "", text
    parts = [part.strip() for part in inner.split(",")]
    # One element is a structure only inside set braces: `(3)` and `3` are numbers, not tuples.
    if _NESTING.search(inner) or (len(parts) < 2 and not text.startswith("\\{")):
        return None
    values = []
    for part in parts:
        if part in _INFINITY and kind == "bracket":
            values.append(_INFINITY[part])
            continue
        value = exact_value(part)
        if value is None:
            return None
        values.append(value)
    return Structure(kind, brackets, tuple(values))


def structure_equal(gold: Structure, pred: Structure) -> bool:
    """Sets compare as sets; tuples and intervals need the same brackets and the same values in order; a
    bare list takes the shape of the other side (see the module docstring)."""
    kinds = {gold.kind, pred.kind}
    if "bracket" not in kinds:
        return set(gold.values) == set(pred.values)
    if kinds == {"bracket", "list"}:
        bracketed = gold if gold.kind == "bracket" else pred
        return bracketed.brackets == "()" and gold.values == pred.values
    return gold.kind == pred.kind and gold.brackets == pred.brackets and gold.values == pred.values
