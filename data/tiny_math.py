"""tiny-math: a deterministic generator of arithmetic problems whose answers need real equivalence checks.

Five families, each its own `data_source`, each with three difficulty levels:

| data_source         | level 1                 | level 2                   | level 3                    |
|---------------------|-------------------------|---------------------------|----------------------------|
| tiny-math/add       | a+b, a,b in 0..9        | a,b in 10..99             | a,b in 100..999            |
| tiny-math/sub       | a-b, a,b in 0..9        | a,b in 10..99 (may be <0) | a,b in 100..999            |
| tiny-math/mul       | a*b, a,b in 1..9        | 2..9 x 10..99             | 10..99 x 10..99            |
| tiny-math/frac      | a/n+b/n, same n in 2..9 | a/m+b/n, m,n in 2..9      | a/m*b/n, m,n in 2..12      |
| tiny-math/decimal   | a.b+c.d                 | two decimal places        | subtraction, 2 places, <0  |

Gold answers are canonical strings: integers (`-12`), reduced fractions (`3/4`), or decimals without
trailing zeros (`2.5`). The same value may be written many ways by a model (`0.75`, `\\frac{3}{4}`,
`3/4`), which is what makes the verifier matter; `answer_forms` lists such renderings.

Train and test are disjoint by problem: a problem's split is a pure function of its canonical expression
(a hash), so no test problem can ever be generated for training, whatever the seed or size.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable
from fractions import Fraction

from rlep.data.problem import Problem

FAMILIES = ("add", "sub", "mul", "frac", "decimal")
LEVELS = (1, 2, 3)
SPLITS = ("train", "test")
SOURCE_PREFIX = "tiny-math"
# One problem in TEST_SHARE_DENOMINATOR goes to the test split (by hash of its expression).
TEST_SHARE_DENOMINATOR = 10


def _ints(rng: random.Random, lo: int, hi: int) -> tuple[int, int]:
    return rng.randint(lo, hi), rng.randint(lo, hi)


def _draw(family: str, level: int, rng: random.Random) -> tuple[str, Fraction]:
    """One random problem of a family and level: (expression text, exact value)."""
    if family in ("add", "sub"):
        lo, hi = {1: (0, 9), 2: (10, 99), 3: (100, 999)}[level]
        a, b = _ints(rng, lo, hi)
        if family == "add":
            return f"{a}+{b}", Fraction(a + b)
        return f"{a}-{b}", Fraction(a - b)
    if family == "mul":
        if level == 1:
            a, b = _ints(rng, 1, 9)
        elif level == 2:
            a, b = rng.randint(2, 9), rng.randint(10, 99)
        else:
            a, b = _ints(rng, 10, 99)
        return f"{a}*{b}", Fraction(a * b)
    if family == "frac":
        if level == 1:
            n = rng.randint(2, 9)
            a, b = rng.randint(1, n - 1), rng.randint(1, n - 1)
            return f"{a}/{n}+{b}/{n}", Fraction(a, n) + Fraction(b, n)
        hi = 9 if level == 2 else 12
        m, n = _ints(rng, 2, hi)
        a, b = rng.randint(1, m - 1), rng.randint(1, n - 1)
        if level == 2:
            return f"{a}/{m}+{b}/{n}", Fraction(a, m) + Fraction(b, n)
        return f"{a}/{m}*{b}/{n}", Fraction(a, m) * Fraction(b, n)
    if family == "decimal":
        places = 1 if level == 1 else 2
        scale = 10**places
        hi = 99 if level == 1 else 999
        a, b = _ints(rng, 1, hi)
        x, y = Fraction(a, scale), Fraction(b, scale)
        op = "-" if level == 3 else "+"
        text = f"{format_decimal(x, places)}{op}{format_decimal(y, places)}"
        return text, (x - y) if op == "-" else (x + y)
    raise ValueError(f"unknown tiny-math family {family!r}; expected one of {FAMILIES}")


def format_decimal(value: Fraction, places: int | None = None) -> str:
    """A terminating fraction as a decimal string; `places=None` drops trailing zeros."""
    sign = "-" if value < 0 else ""
    value = abs(value)
    digits = places if places is not None else 12
    scaled = value * 10**digits
    if scaled.denominator != 1:
        raise ValueError(f"{value} has no exact decimal form with {digits} places")
    whole, frac = divmod(int(scaled), 10**digits)
    frac_text = str(frac).rjust(digits, "0") if digits else ""
    if places is None:
        frac_text = frac_text.rstrip("0")
    return f"{sign}{whole}.{frac_text}" if frac_text else f"{sign}{whole}"


def canonical_answer(value: Fraction, family: str) -> str:
    """The gold string: integer, reduced `p/q`, or (decimal family) a decimal without trailing zeros."""
    if value.denominator == 1:
        return str(value.numerator)
    if family == "decimal":
        return format_decimal(value)
    return f"{value.numerator}/{value.denominator}"


def _terminates(value: Fraction) -> bool:
    d = value.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def answer_forms(answer: str) -> list[str]:
    """Equivalent LaTeX/plain renderings of a gold answer (the first is the gold itself).

    `3/4` -> `3/4`, `\\frac{3}{4}`, `0.75`; `2.5` -> `2.5`, `5/2`, `\\frac{5}{2}`; `-7` -> `-7`.
    """
    value = Fraction(answer)
    forms = [answer]
    if value.denominator != 1:
        sign = "-" if value < 0 else ""
        p, q = abs(value.numerator), value.denominator
        for form in (f"{sign}{p}/{q}", f"{sign}\\frac{{{p}}}{{{q}}}"):
            if form not in forms:
                forms.append(form)
        if _terminates(value):
            decimal = format_decimal(value)
            if decimal not in forms:
                forms.append(decimal)
    return forms


def split_of(expression: str) -> str:
    """The split a problem belongs to, fixed by its expression (stable across seeds and sizes)."""
    digest = hashlib.sha1(expression.encode()).digest()
    return "test" if int.from_bytes(digest[:4], "big") % TEST_SHARE_DENOMINATOR == 0 else "train"


def problem_text(expression: str) -> str:
    return f"{expression}=?"


def generate(
    split: str,
    n: int,
    seed: int = 0,
    families: Iterable[str] = FAMILIES,
    levels: Iterable[int] = LEVELS,
) -> list[Problem]:
    """`n` distinct problems of `split`, cycling over families and levels in equal shares.

    Deterministic for a given (split, n, seed, families, levels). If a family/level cell has fewer
    distinct problems than its share (level-1 addition has 100), the other cells fill the gap.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown tiny-math split {split!r}; expected one of {SPLITS}")
    families, levels = tuple(families), tuple(levels)
    for family in families:
        if family not in FAMILIES:
            raise ValueError(f"unknown tiny-math family {family!r}; expected one of {FAMILIES}")
    for level in levels:
        if level not in LEVELS:
            raise ValueError(f"unknown tiny-math level {level!r}; expected one of {LEVELS}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(f"tiny-math/{split}/{seed}")
    cells = [(f, lv) for f in families for lv in levels]
    seen: set[str] = set()
    problems: list[Problem] = []
    exhausted: set[tuple[str, int]] = set()
    misses = {cell: 0 for cell in cells}
    i = 0
    while len(problems) < n and len(exhausted) < len(cells):
        cell = cells[i % len(cells)]
        i += 1
        if cell in exhausted:
            continue
        family, level = cell
        expression, value = _draw(family, level, rng)
        if expression in seen or split_of(expression) != split:
            misses[cell] += 1
            # A cell that keeps repeating itself has (nearly) run out of distinct problems.
            if misses[cell] > 200:
                exhausted.add(cell)
            continue
        misses[cell] = 0
        seen.add(expression)
        problems.append(
            Problem(
                id=f"{family}:{expression}",
                problem=problem_text(expression),
                answer=canonical_answer(value, family),
                data_source=f"{SOURCE_PREFIX}/{family}",
                level=level,
            )
        )
    return problems
