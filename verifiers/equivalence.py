"""Symbolic equivalence of two normalised answers: sympy, through math-verify.

This runs only inside the worker processes of `verifiers.sandbox`, where the hard time and memory limits
apply: LaTeX parsing and sympy simplification can take unbounded time on hostile input, and some of it
is C code that no signal interrupts. math-verify's own timeouts (signal.alarm) are switched off; the
worker's soft timer and the pool's kill bound the time instead.

Only math-verify's LaTeX reader is used (latex2sympy2_extended, an ANTLR grammar that builds sympy
objects directly). Its "plain expression" reader is not: it hands text to sympy's `parse_expr`, which
evaluates Python.

What math-verify decides for us: `\\frac{1}{\\sqrt2} == \\frac{\\sqrt2}{2}`, `(x+1)^2 == x^2+2x+1`, sets are
order-free (`\\{1,2\\} == \\{2,1\\}`, a bare `1,2` is a set too), tuples are ordered, interval ends must
match in kind (`[1,2) != (1,2)`), `x=1,y=2` systems compare as sets of equations, `\\text{...}` answers
compare case-insensitively. What we decide on top: rational values are compared exactly (the fast path's
rounding rule), and a decimal compared with an irrational value is rounded to `float_rounding` places.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

import sympy
from math_verify import LatexExtractionConfig, parse, verify

from rlep.verifiers.fastpath import exact_equal, exact_value
from rlep.verifiers.normalize import Answer

_LATEX_ONLY = (LatexExtractionConfig(boxed_match_priority=0),)


def parse_latex(text: str) -> list:
    """math-verify's reading of a normalised answer: a list of sympy objects, empty if unreadable."""
    return parse(f"${text}$", extraction_config=list(_LATEX_ONLY), fallback_mode="no_fallback", parsing_timeout=None)


@lru_cache(maxsize=8192)
def _parse(text: str) -> tuple:
    # Gold answers repeat across samples of a prompt and across steps, and so do final answers: parse
    # each text once per worker (the LaTeX grammar takes milliseconds to tens of milliseconds).
    return tuple(parse_latex(text))


@lru_cache(maxsize=4096)
def _gold_rational(text: str) -> Fraction | None:
    value = exact_value(text)
    if value is not None:
        return value
    parsed = _parse(text)
    return rational_value(parsed[0]) if parsed else None


def rational_value(expression: object) -> Fraction | None:
    """The exact rational a parsed answer denotes, if it is a number that evaluates to a rational."""
    if not isinstance(expression, sympy.Basic) or not expression.is_number:
        return None
    evaluated = expression.doit()
    if isinstance(evaluated, sympy.Rational):
        return Fraction(int(evaluated.p), int(evaluated.q))
    return None


@lru_cache(maxsize=4096)
def numeric_value(text: str) -> Fraction | None:
    """The value of a normalised answer that is a real number (`\\frac{1}{\\sqrt{3}}`), as the exact
    rational of its 30-digit evaluation; None for anything else."""
    parsed = _parse(text)
    if not parsed or not isinstance(parsed[0], sympy.Expr) or not parsed[0].is_number:
        return None
    value = parsed[0].evalf(30)
    if not isinstance(value, sympy.Float) or not value.is_finite:
        return None
    exact = sympy.Rational(value)
    return Fraction(int(exact.p), int(exact.q))


@lru_cache(maxsize=65536)
def symbolic_equal(gold: Answer, pred: Answer, float_rounding: int) -> bool | None:
    """Whether `pred` is equivalent to `gold`; None when either cannot be read as mathematics.

    Cached per worker: the samples of one prompt often end in the same answer written in different
    reasoning, and a repeat then costs a dictionary lookup instead of a sympy simplification. A call
    that times out or fails raises, and lru_cache stores nothing for it.
    """
    # The rounding rule holds here too: math-verify alone would accept 0.333333 for 1/3. Percent signs
    # are left off for this check and applied by exact_equal.
    gold_value = _gold_rational(gold.text)
    if gold_value is not None:
        pred_value = exact_value(pred.text)
        if pred_value is None:
            pred_parsed = _parse(pred.text)
            if not pred_parsed:
                return None
            pred_value = rational_value(pred_parsed[0])
        if pred_value is not None:
            return exact_equal(gold, gold_value, pred, pred_value)
    gold_parsed = _parse(_with_percent(gold))
    pred_parsed = _parse(_with_percent(pred))
    if not gold_parsed or not pred_parsed:
        return None
    if not (gold.percent or pred.percent):
        decided = expression_identity(gold_parsed[0], pred_parsed[0])
        if decided is not None:
            return decided
    return bool(verify(list(gold_parsed), list(pred_parsed), float_rounding=float_rounding, timeout_seconds=None))


# Distinct rationals at which a difference of two expressions is evaluated (one per free symbol); a
# polynomial or rational function that is not identically zero is non-zero at almost every point.
_PROBE_POINTS = tuple(sympy.Rational(p, q) for p, q in ((7, 3), (11, 5), (13, 7), (17, 4), (19, 6), (23, 9)))
_MAX_EXPONENT = 32


def expression_identity(gold: object, pred: object) -> bool | None:
    """A quick, sound decision for two plain expressions, or None to leave it to math-verify.

    math-verify decides two expressions without decimals by `simplify(gold - pred) == 0`, which takes
    tens of milliseconds on a polynomial. Here the difference is expanded (exponents bounded, so the
    expansion is small): zero means equal. Otherwise it is evaluated at rational points: a non-zero
    rational value proves the two differ, which is what simplify would conclude. Anything else (sets,
    relations, matrices, a bare symbol that math-verify compares by name, decimals that it rounds,
    functions such as sin whose values are not rational) returns None.
    """
    if not all(_plain_expression(side) for side in (gold, pred)):
        return None
    difference = gold - pred
    if sympy.expand(difference) == 0:
        return True
    symbols = sorted(difference.free_symbols, key=str)
    if len(symbols) > len(_PROBE_POINTS):
        return None
    value = difference.subs(dict(zip(symbols, _PROBE_POINTS)))
    if isinstance(value, sympy.Rational) and value != 0:
        return False
    return None


def _plain_expression(expression: object) -> bool:
    if not isinstance(expression, sympy.Expr) or isinstance(expression, sympy.Symbol):
        return False
    if expression.has(sympy.Float) or not expression.free_symbols:
        return False
    return all(
        power.exp.is_Rational and abs(power.exp.p) <= _MAX_EXPONENT and power.exp.q <= _MAX_EXPONENT
        for power in expression.atoms(sympy.Pow)
    )


@lru_cache(maxsize=4096)
def equations_equal(gold_equation: str, pred_equation: str) -> bool | None:
    """Whether two equations `a = b` and `c = d` have the same solution set, by a sufficient test:
    `(a - b) / (c - d)` simplifies to a non-zero number (equal up to a constant factor, which covers
    `2x+4y-3=0` vs `y=-\\frac{1}{2}x+\\frac{3}{4}` and scaled conics). None when either is not one
    equation or cannot be read.
    """
    sides = [_equation_sides(gold_equation), _equation_sides(pred_equation)]
    if None in sides:
        return None
    differences = []
    for left, right in sides:
        left_parsed, right_parsed = _parse(left), _parse(right)
        if not left_parsed or not right_parsed:
            return None
        left_value, right_value = left_parsed[0], right_parsed[0]
        if not isinstance(left_value, sympy.Expr) or not isinstance(right_value, sympy.Expr):
            return None
        differences.append(left_value - right_value)
    if differences[1] == 0 or not differences[0].free_symbols:
        return None
    ratio = sympy.simplify(differences[0] / differences[1])
    return bool(ratio.is_number and ratio.is_finite and ratio != 0)


def _equation_sides(equation: str) -> tuple[str, str] | None:
    if equation.count("=") != 1 or "," in equation:
        return None
    left, right = equation.split("=")
    return (left.strip(), right.strip()) if left.strip() and right.strip() else None


def _with_percent(answer: Answer) -> str:
    # math-verify reads `50\%` as either 50 or 0.5, which is our percent policy.
    return f"{answer.text}\\%" if answer.percent else answer.text
