"""Decisions taken before math-verify's `verify`: each must be taken where it claims to be, and agree with
what math-verify itself would have said (these run in-process, on trusted strings)."""

from __future__ import annotations

import pytest
from math_verify import verify

import rlep.verifiers.judge as judge_module
from rlep.tasks.settings.verifier import VerifierConfig
from rlep.verifiers.equivalence import expression_identity, parse_latex

# (gold, pred, the quick decision: True / False, or None where it must leave the case to math-verify)
IDENTITIES: list[tuple[str, str, bool | None]] = [
    ("x^2-49", "(x-7)(x+7)", True),
    ("x^2+6x+9", "(x+3)^2", True),
    ("(a+b)^3", "a^3+3a^2b+3ab^2+b^3", True),
    ("\\frac{x^2-1}{x+1}", "x-1", None),  # not identical after expansion, and zero at the probe point
    ("x^2-49", "(x-7)^2", False),
    ("x^2+6x+9", "(x-3)^2", False),
    ("2x+3y", "3x+2y", False),
    ("\\frac{1}{x}", "\\frac{1}{x+1}", False),
    ("\\sin^2 x+\\cos^2 x", "1", None),  # a value at a rational point is not rational: math-verify decides
    ("0.5x", "\\frac{x}{2}", None),  # decimals: math-verify rounds them
    ("x^{100}", "x^{100}+1", None),  # exponent over the bound: no expansion
    ("x", "y", None),  # bare symbols: math-verify compares them by name
    ("\\{x, 1\\}", "\\{1, x\\}", None),  # sets are math-verify's
]


@pytest.mark.parametrize(("gold", "pred", "expected"), IDENTITIES)
def test_expression_identity_is_sound(gold, pred, expected):
    gold_parsed, pred_parsed = parse_latex(gold), parse_latex(pred)
    assert expression_identity(gold_parsed[0], pred_parsed[0]) is expected
    if expected is not None:
        assert bool(verify(gold_parsed, pred_parsed, timeout_seconds=None)) is expected


@pytest.mark.parametrize(
    ("gold", "pred"),
    [("[3,7)", "7"), ("(1,3)", "3"), ("\\{1,2,3\\}", "2"), ("5", "(1,5)"), ("2", "\\{1, 2\\}")],
)
def test_a_list_of_numbers_is_never_one_number_and_needs_no_sympy(monkeypatch, gold, pred):
    def no_sympy(*args):
        raise AssertionError("reached the symbolic comparison")

    monkeypatch.setattr(judge_module, "symbolic_equal", no_sympy)
    assert judge_module.judge(f"\\boxed{{{pred}}}", gold, VerifierConfig()) == (False, pred, "not-equal")
    assert not verify(parse_latex(gold), parse_latex(pred), timeout_seconds=None)
