"""Worked solutions for tiny-math: short step-by-step solutions in several styles per family.

The bare-answer task (`\\boxed{9.98}`) gives every correct answer to a problem the same text, so a pool of
verified answers holds one path per problem. A model supervised on these worked solutions writes steps
before the boxed answer, in one of several styles, so its correct answers to one problem differ:

| family  | styles                                                                                   |
|---------|------------------------------------------------------------------------------------------|
| add     | `column` (digit by digit with carries), `split` (add the place parts of b one at a time)  |
| sub     | `column` (digit by digit with borrows), `split` (take off the place parts of b)           |
| mul     | `right` (distribute over the second factor), `left` (over the first)                     |
| frac    | `lcd` (least common denominator, reduce by the gcd), `product` (cross-multiply over the  |
|         | product of the denominators, reduce one prime at a time)                                 |
| decimal | `column` (with carries/borrows), `scaled` (whole numbers x10 or x100, then divide), and   |
|         | for additions `parts` (whole parts, then fractional parts)                               |

Every line is an optional `label: ` then a chain `e1=e2=...` of equal arithmetic expressions, then an
optional `, carry 1` or `, borrow 1`; the last line is `\\boxed{answer}`. The steps are where a tiny model
errs (a dropped carry, a wrong partial sum); the verifier scores only the boxed answer. `step_errors` checks
every chain and every carry and borrow, so a generated solution can be tested, and a model's one inspected.
"""

from __future__ import annotations

import ast
import math
import random
import re
from fractions import Fraction

from rlep.data.problem import Problem

PLACE_NAMES = {-2: "hundredths", -1: "tenths", 0: "ones", 1: "tens", 2: "hundreds", 3: "thousands"}
STYLES = {
    "add": ("column", "split"),
    "sub": ("column", "split"),
    "mul": ("right", "left"),
    "frac": ("lcd", "product"),
    "decimal": ("column", "scaled", "parts"),
}


def styles_for(family: str, level: int) -> tuple[str, ...]:
    """The styles a problem of this cell can be solved in (`parts` only for decimal additions)."""
    if family not in STYLES:
        raise ValueError(f"unknown tiny-math family {family!r}; expected one of {tuple(STYLES)}")
    if family == "decimal" and level == 3:
        return ("column", "scaled")
    return STYLES[family]


def worked_solution(problem: Problem, style: str | None = None, rng: random.Random | None = None) -> str:
    """A worked solution of a tiny-math problem ending in `\\boxed{gold}`; a random style if `style` is None."""
    family, _, expression = problem.id.partition(":")
    styles = styles_for(family, problem.level)
    if style is None:
        style = (rng or random.Random(0)).choice(styles)
    if style not in styles:
        raise ValueError(f"style {style!r} is not one of {styles} for {family} level {problem.level}")
    lines = _SOLVERS[family](expression, style)
    return "\n".join([*lines, f"\\boxed{{{problem.answer}}}"])


# ---------------------------------------------------------------------------------------------------
# Solvers: expression text -> step lines (without the boxed answer)


def _operands(expression: str, op: str) -> tuple[str, str]:
    left, _, right = expression.partition(op)
    return left, right


def _place_parts(n: int) -> list[int]:
    """94 -> [90, 4]; 605 -> [600, 5]; 7 -> [7]."""
    digits = str(n)
    parts = [int(d) * 10 ** (len(digits) - 1 - i) for i, d in enumerate(digits)]
    return [p for p in parts if p] or [0]


def _split_chain(a: int, b: int, op: str) -> str:
    """`a op b` by adding (or taking off) the place parts of b one at a time: 77+95=77+90+5=167+5=172."""
    parts = _place_parts(b)
    if len(parts) == 1:
        return f"{a}{op}{b}={b}{op}{a}={a + b}" if op == "+" else f"{a}{op}{b}={a - b}"
    chain, acc = [f"{a}{op}{b}"], a
    for i, part in enumerate(parts):
        chain.append(f"{acc}" + "".join(f"{op}{p}" for p in parts[i:]))
        acc = acc + part if op == "+" else acc - part
    chain.append(str(acc))
    return "=".join(chain)


def _digits(text: str, places: int) -> dict[int, int]:
    """Digit of each place (10**place) of a non-negative decimal string with `places` decimal places."""
    scaled = int(text.replace(".", "")) if "." in text else int(text) * 10**places
    return {p - places: int(d) for p, d in enumerate(reversed(str(scaled)))}


def _column_add(x: str, y: str, places: int) -> list[str]:
    dx, dy = _digits(x, places), _digits(y, places)
    lines, carry = [], 0
    for place in range(-places, max(max(dx), max(dy)) + 1):
        a, b = dx.get(place, 0), dy.get(place, 0)
        total = a + b + carry
        line = f"{PLACE_NAMES[place]}: {a}+{b}" + (f"+{carry}" if carry else "") + f"={total}"
        carry = total // 10
        lines.append(line + (", carry 1" if carry else ""))
    if carry:
        lines.append(f"{PLACE_NAMES[place + 1]}: 0+0+1=1")
    return lines


def _column_sub(x: str, y: str, places: int) -> list[str]:
    """Column subtraction of y from x (x >= y)."""
    dx, dy = _digits(x, places), _digits(y, places)
    lines, borrow = [], 0
    for place in range(-places, max(dx) + 1):
        a, b = dx.get(place, 0), dy.get(place, 0)
        need = a - borrow < b
        left = (f"10+{a}" if need else f"{a}") + (f"-{borrow}" if borrow else "")
        value = a + (10 if need else 0) - borrow - b
        lines.append(f"{PLACE_NAMES[place]}: {left}-{b}={value}" + (", borrow 1" if need else ""))
        borrow = 1 if need else 0
    return lines


def _column(x: str, y: str, op: str, places: int) -> list[str]:
    if op == "+":
        return _column_add(x, y, places)
    if Fraction(x) >= Fraction(y):
        return _column_sub(x, y, places)
    return [f"{x}-{y}=-({y}-{x})", *_column_sub(y, x, places)]


def _integer(expression: str, style: str) -> list[str]:
    op = "+" if "+" in expression else "-"
    x, y = _operands(expression, op)
    if style == "column":
        return _column(x, y, op, 0)
    a, b = int(x), int(y)
    if op == "-" and a < b:
        inner = _split_chain(b, a, "-").split("=")
        return [f"{a}-{b}=" + "=".join(f"-({e})" if "-" in e or "+" in e else f"-{e}" for e in inner)]
    return [_split_chain(a, b, op)]


def _mul(expression: str, style: str) -> list[str]:
    x, y = _operands(expression, "*")
    a, b = int(x), int(y)
    if style == "left":
        a, b = (a, b) if a >= 10 else (b, a)
        head = f"{x}*{y}" if (a, b) == (int(x), int(y)) else f"{x}*{y}={a}*{b}"
        parts = _place_parts(a)
        if len(parts) == 1:
            return [f"{head}={a * b}"]
        terms = "+".join(f"{p}*{b}" for p in parts)
        return [f"{head}={terms}=" + "+".join(str(p * b) for p in parts) + f"={a * b}"]
    parts = _place_parts(b)
    if len(parts) == 1:
        return [f"{a}*{b}={a * b}"]
    terms = "+".join(f"{a}*{p}" for p in parts)
    return [f"{a}*{b}={terms}=" + "+".join(str(a * p) for p in parts) + f"={a * b}"]


def _reduce_steps(num: int, den: int, by_primes: bool) -> list[str]:
    """`num/den` reduced: at once by the gcd, or one smallest prime factor at a time; an integer at the end."""
    steps = []
    while (g := math.gcd(num, den)) > 1:
        f = next(p for p in range(2, g + 1) if g % p == 0) if by_primes else g
        num, den = num // f, den // f
        steps.append(f"{num}/{den}" if den != 1 else str(num))
    if den == 1 and not steps:
        steps.append(str(num))
    return steps


def _frac(expression: str, style: str) -> list[str]:
    by_primes = style == "product"
    if "*" in expression:
        x, y = _operands(expression, "*")
        (a, m), (b, n) = (map(int, x.split("/")), map(int, y.split("/")))
        head = [expression, f"({a}*{b})/({m}*{n})"] if by_primes else [expression]
        return ["=".join([*head, f"{a * b}/{m * n}", *_reduce_steps(a * b, m * n, by_primes)])]
    x, y = _operands(expression, "+")
    (a, m), (b, n) = (map(int, x.split("/")), map(int, y.split("/")))
    if style == "lcd" and m == n:
        chain = [expression, f"({a}+{b})/{n}", f"{a + b}/{n}"]
        num, den = a + b, n
    else:
        den = m * n if by_primes else math.lcm(m, n)
        ax, bx = a * den // m, b * den // n
        middle = f"({a}*{n}+{b}*{m})/({m}*{n})" if by_primes else f"{ax}/{den}+{bx}/{den}"
        chain = [expression, middle, f"{ax + bx}/{den}"]
        num = ax + bx
    return ["=".join(chain + _reduce_steps(num, den, by_primes))]


def _decimal(expression: str, style: str) -> list[str]:
    op = "-" if "-" in expression else "+"
    x, y = _operands(expression, op)
    places = len(x.partition(".")[2])
    if style == "column":
        return _column(x, y, op, places)
    scale = 10**places
    if style == "scaled":
        a, b = int(x.replace(".", "")), int(y.replace(".", ""))
        inner = _integer(f"{a}{op}{b}", "split")[0]
        total = a + b if op == "+" else a - b
        value = Fraction(total, scale)
        return [f"x{scale}: {inner}", f"{total}/{scale}={_decimal_text(value, places)}"]
    if op != "+":
        raise ValueError(f"style 'parts' is for additions, got {expression!r}")
    (wx, fx), (wy, fy) = x.split("."), y.split(".")
    fa, fb = Fraction(int(fx), scale), Fraction(int(fy), scale)
    whole, frac = int(wx) + int(wy), fa + fb
    chain = [
        expression,
        f"{wx}+{wy}+{_decimal_text(fa, places)}+{_decimal_text(fb, places)}",
        f"{whole}+{_decimal_text(frac, places)}",
        _decimal_text(whole + frac, places),
    ]
    return ["=".join(chain)]


def _decimal_text(value: Fraction, places: int) -> str:
    from rlep.data.tiny_math import format_decimal

    return format_decimal(value, places) if value.denominator != 1 else str(value.numerator)


_SOLVERS = {"add": _integer, "sub": _integer, "mul": _mul, "frac": _frac, "decimal": _decimal}


# ---------------------------------------------------------------------------------------------------
# Checking a worked solution


_LINE = re.compile(r"^(?:(?P<label>[a-z0-9]+): )?(?P<chain>[-0-9+*/().=]+)(?:, (?P<note>carry|borrow) 1)?$")


def evaluate(expression: str) -> Fraction:
    """Exact value of an arithmetic expression of numbers, + - * / and parentheses (no names, no calls)."""

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return Fraction(ast.get_source_segment(expression, node) or str(node.value))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
            if isinstance(node.op, ast.Mult):
                return left * right
            return left / right
        raise ValueError(f"not plain arithmetic: {expression!r}")

    return walk(ast.parse(expression, mode="eval"))


def step_errors(text: str) -> list[str]:
    """Every wrong step of a worked solution: an unequal chain, a carry or borrow the next column misuses.

    Empty for a correct solution. Does not judge the boxed answer (that is the verifier's job).
    """
    errors: list[str] = []
    lines = [line for line in text.strip().split("\n") if not line.startswith("\\boxed")]
    note_before = None
    for number, line in enumerate(lines, 1):
        match = _LINE.match(line)
        if not match:
            errors.append(f"line {number}: not a step: {line!r}")
            note_before = None
            continue
        sides = match["chain"].split("=")
        try:
            values = [evaluate(side) for side in sides]
        except (ValueError, SyntaxError, ZeroDivisionError) as error:
            errors.append(f"line {number}: {error}")
            note_before = None
            continue
        if len(set(values)) > 1:
            errors.append(f"line {number}: {match['chain']} is not a chain of equal values")
        if match["note"] == "carry" and values[-1] < 10:
            errors.append(f"line {number}: carry from a column sum under 10")
        left = sides[0]
        if note_before == "carry" and not left.endswith("+1"):
            errors.append(f"line {number}: the carry from the previous column is missing")
        if note_before == "borrow" and "-1-" not in left:
            errors.append(f"line {number}: the borrow from the previous column is missing")
        if match["label"] in PLACE_NAMES.values() and not 0 <= values[-1] < 20:
            errors.append(f"line {number}: a column value out of range")
        note_before = match["note"]
    return errors
