"""Normalisation and the exact fast path: (raw, expected) tables."""

from __future__ import annotations

from fractions import Fraction

import pytest

from rlep.verifiers.fastpath import exact_structure, exact_value, structure_equal
from rlep.verifiers.normalize import Answer, normalize_answer


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("$3$", Answer("3")),
        ("\\(3\\)", Answer("3")),
        ("1,234", Answer("1234")),
        ("1,2", Answer("1,2")),
        ("\\{100,200\\}", Answer("\\{100,200\\}")),
        ("50\\%", Answer("50", percent=True)),
        ("30^{\\circ}", Answer("30")),
        ("\\$1,200", Answer("1200")),
        ("5\\text{ cm}^2", Answer("5")),
        ("12 apples", Answer("12")),
        ("2 x", Answer("2 x")),
        ("\\text{Monday}", Answer("monday")),  # a whole text answer: unwrapped, words case-folded
        ("x = 3", Answer("3")),
        ("x = 1+2 = 3", Answer("3")),
        ("x=1, y=2", Answer("x=1, y=2")),
        ("\\dfrac34", Answer("\\frac{3}{4}")),
        ("\\frac3{4}", Answer("\\frac{3}{4}")),
        ("2\\frac12", Answer("(2+\\frac{1}{2})")),
        ("2\\frac32", Answer("2\\frac{3}{2}")),
        ("2 1/2", Answer("(2+\\frac{1}{2})")),
        ("１２", Answer("12")),
        ("x²", Answer("x^{2}")),
        ("−5", Answer("-5")),
        ("\\left(1, 2\\right]", Answer("(1, 2]")),
        ("3.", Answer("3")),
    ],
)
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", Fraction(42)),
        ("-42", Fraction(-42)),
        ("1000.0", Fraction(1000)),
        ("0.75", Fraction(3, 4)),
        (".5", Fraction(1, 2)),
        ("\\frac{3}{4}", Fraction(3, 4)),
        ("-\\frac{3}{4}", Fraction(-3, 4)),
        ("\\frac{-3}{4}", Fraction(-3, 4)),
        ("\\frac{1.5}{3}", Fraction(1, 2)),
        ("6/8", Fraction(3, 4)),
        ("(2+\\frac{1}{2})", Fraction(5, 2)),
        ("-(2+\\frac{1}{2})", Fraction(-5, 2)),
        ("1/0", None),
        ("1e9", None),  # exponents go to sympy, never to Fraction
        ("1" * 41, None),  # over the digit cap
        ("x", None),
        ("\\sqrt{2}", None),
        ("1,2", None),
    ],
)
def test_exact_value(text, expected):
    assert exact_value(text) == expected


@pytest.mark.parametrize(
    ("gold", "pred", "expected"),
    [
        ("\\{1,2\\}", "\\{2,1\\}", True),
        ("\\{1,2\\}", "2, 1", True),
        ("\\{1,2\\}", "\\{1,2,2\\}", True),
        ("\\{1,2\\}", "(1,2)", False),
        ("(1,2)", "(1,2)", True),
        ("(1,2)", "(2,1)", False),
        ("(1,2)", "[1,2]", False),
        ("[1,2)", "[1,2)", True),
        ("(-\\infty, 3]", "(-\\infty,3]", True),
        ("(-\\infty, 3]", "(-\\infty,3)", False),
        ("(\\frac{1}{2}, 3)", "(0.5, 3)", True),
    ],
)
def test_structure_equal(gold, pred, expected):
    assert structure_equal(exact_structure(gold), exact_structure(pred)) is expected


@pytest.mark.parametrize("text", ["3", "(3)", "(1,(2))", "x, y", "\\{1, \\infty\\}", "(1+2, 3)"])
def test_exact_structure_declines(text):
    assert exact_structure(text) is None
