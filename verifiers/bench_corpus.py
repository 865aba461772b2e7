"""The seeded corpus of `rlep bench verify` (verifiers.bench): what the trainer verifies, plus hostile answers.

Tiny-math style answers (integers, negatives, fractions written as `0.75`, `3/4` or `\\frac{3}{4}`,
decimals) in the answer formats models use (boxed, `Answer:`, `####`, "the answer is", bare last number,
with and without `<think>`), about a third of them wrong; a share of varied LaTeX (radicals, polynomials,
intervals, sets, percent, units); and a hostile share (power towers, injections, nested parentheses,
a 1 MB response, NUL bytes, ...).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction

HOSTILE_SHARE = 0.01
LATEX_SHARE = 0.14
WRONG_SHARE = 0.3


@dataclass(frozen=True)
class BenchPair:
    response: str
    gold: str
    kind: str
    hostile: bool = False
    # Whether the written answer is right, by construction (None for hostile pairs): the truth against
    # which false positives and false negatives are counted.
    expected: bool | None = None


def build_corpus(n_pairs: int, seed: int = 0, hostile_share: float = HOSTILE_SHARE) -> list[BenchPair]:
    """`n_pairs` (response, gold) pairs: tiny-math style, varied LaTeX and a hostile share (see module doc)."""
    rng = random.Random(f"verify-bench/{seed}")
    pairs = []
    for _ in range(n_pairs):
        draw = rng.random()
        if draw < hostile_share:
            pairs.append(_hostile_pair(rng))
        elif draw < hostile_share + LATEX_SHARE:
            pairs.append(_latex_pair(rng))
        else:
            pairs.append(_arithmetic_pair(rng))
    return pairs


def _arithmetic_pair(rng: random.Random) -> BenchPair:
    kind = rng.choice(("integer", "integer", "negative", "fraction", "decimal"))
    if kind == "integer":
        value = Fraction(rng.randint(0, 99_999))
    elif kind == "negative":
        value = Fraction(-rng.randint(1, 9_999))
    elif kind == "fraction":
        value = Fraction(rng.randint(1, 99), rng.choice((2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 20, 25)))
    else:
        value = Fraction(rng.randint(-9_999, 9_999), 100)
    # Gold strings as tiny-math writes them: integers, reduced fractions, decimals without trailing zeros.
    gold = _decimal(value) if kind == "decimal" else _canonical(value)
    answer = value if rng.random() >= WRONG_SHARE else value + rng.choice((1, -1, 10, Fraction(1, 2)))
    return BenchPair(_render(rng, rng.choice(_written_forms(answer))), gold, kind, expected=answer == value)


def _canonical(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    return f"{value.numerator}/{value.denominator}"


def _decimal(value: Fraction) -> str:
    text = f"{float(value):.6f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _written_forms(value: Fraction) -> list[str]:
    forms = [_canonical(value)]
    if value.denominator == 1:
        forms.append(f"{value.numerator}.0")
        if abs(value) >= 1000:
            forms.append(f"{value.numerator:,}")
    else:
        sign = "-" if value < 0 else ""
        p, q = abs(value.numerator), value.denominator
        forms += [f"{sign}\\frac{{{p}}}{{{q}}}", f"{sign}\\dfrac{{{p}}}{{{q}}}", f"{value.numerator}/{q}"]
        if 10**6 % q == 0:
            forms.append(_decimal(value))
    return forms


_THINKING = (
    "Let me add the numbers step by step. 12 + 7 = 19, then carry the 1.",
    "First compute the product, 6 times 7 is 42; then adjust.",
    "We need a common denominator of 12 here.",
)


def _render(rng: random.Random, answer: str) -> str:
    style = rng.randrange(7)
    if style == 0:
        text = f"\\boxed{{{answer}}}"
    elif style == 1:
        text = f"The sum is computed above. The answer is ${answer}$."
    elif style == 2:
        text = f"{rng.choice(_THINKING)}\n#### {answer}"
    elif style == 3:
        text = f"{rng.choice(_THINKING)}\nAnswer: {answer}"
    elif style == 4:
        text = f"<think>{rng.choice(_THINKING)}</think>So the result is $\\boxed{{{answer}}}$."
    elif style == 5:
        text = f"{rng.choice(_THINKING)} Therefore the final answer is $\\boxed{{{answer}}}$"
    else:
        text = f"{rng.choice(_THINKING)} So we get {answer}"
    return text


def _latex_case(rng: random.Random) -> tuple[str, str, str]:
    """(gold, a right answer, a wrong answer) in varied LaTeX, with random numbers so that few repeat."""
    a = rng.randint(2, 30)
    b = rng.randint(a + 1, 60)
    k = rng.choice((2, 3, 5, 6, 7, 10, 11))
    e = a % 12 + 1
    cases = (
        (f"\\frac{{\\sqrt{{{k}}}}}{{{k}}}", f"\\frac{{1}}{{\\sqrt{{{k}}}}}", f"\\sqrt{{{k}}}"),
        (f"{a}\\sqrt{{{k}}}", f"\\sqrt{{{a * a * k}}}", f"{a + 1}\\sqrt{{{k}}}"),
        (f"x^2+{2 * a}x+{a * a}", f"(x+{a})^2", f"(x-{a})^2"),
        (f"x^2-{a * a}", f"(x-{a})(x+{a})", f"(x-{a})^2"),
        (f"\\frac{{{a}\\pi}}{{{b}}}", f"{a}\\pi/{b}", f"\\frac{{{b}\\pi}}{{{a}}}"),
        (f"[{a},{b})", f"[{a},{b})", f"({a},{b})"),
        (f"(-\\infty, {a}]", f"(-\\infty,{a}]", f"(-\\infty,{a})"),
        (f"\\{{{a},{b},{a + b}\\}}", f"\\{{{a + b},{a},{b}\\}}", f"\\{{{a},{b}\\}}"),
        (f"({a},{b})", f"({a}, {b})", f"({b},{a})"),
        (f"{a}\\%", f"{a}\\%", f"{a + 1}\\%"),
        (f"{a}", f"{a}^\\circ", f"{a + 1}^\\circ"),
        (f"{a}", f"{a}\\text{{ cm}}", f"{a + 1}\\text{{ cm}}"),
        (f"{a}", f"x = {a}", f"x = {a + 1}"),
        (f"{a * 1000 + b}", f"\\${a},{b:03d}", f"\\${a + 1},{b:03d}"),
        (f"2^{{{e}}}", str(2**e), str(2 ** (e + 1))),
        (f"\\frac{{{a}}}{{{b}}}", f"\\tfrac{{{a}}}{{{b}}}", f"\\tfrac{{{b}}}{{{a}}}"),
    )
    return rng.choice(cases)


def _latex_pair(rng: random.Random) -> BenchPair:
    gold, right, wrong = _latex_case(rng)
    answer = right if rng.random() >= WRONG_SHARE else wrong
    return BenchPair(_render(rng, answer), gold, "latex", expected=answer is right)


_HOSTILE_RESPONSES = (
    "\\boxed{9^{9^{9^{9}}}}",
    "\\boxed{__import__('os').system('true')}",
    "\\boxed{" + "(" * 5000 + "1" + ")" * 5000 + "}",
    "x" * 1_000_000,
    "\\boxed{\x001\x00}",
    "\\boxed{{{{1",
    "\\boxed{１２}",
    "\\boxed{}",
    "\\boxed{" + "2^{" * 100 + "2" + "}" * 100 + "}",
    "Answer: __import__('os').getcwd()",
)


def _hostile_pair(rng: random.Random) -> BenchPair:
    return BenchPair(rng.choice(_HOSTILE_RESPONSES), str(rng.randint(1, 20)), "hostile", hostile=True)
