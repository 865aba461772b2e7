from fractions import Fraction

import pytest

from rlep.data import tiny_math
from rlep.data.problem import DEFAULT_PROMPT_TEMPLATE, render_prompt


def _value(expression: str) -> Fraction:
    """Evaluate a tiny-math expression exactly, independently of the generator (no eval)."""
    for op in ("+", "*"):
        if op in expression:
            left, right = expression.split(op, 1)
            a, b = _value(left), _value(right)
            return a + b if op == "+" else a * b
    if "-" in expression[1:]:
        cut = expression.index("-", 1)
        return _value(expression[:cut]) - _value(expression[cut + 1 :])
    return Fraction(expression)


def test_deterministic_and_sized():
    assert tiny_math.generate("train", 300, seed=3) == tiny_math.generate("train", 300, seed=3)
    assert tiny_math.generate("train", 300, seed=3) != tiny_math.generate("train", 300, seed=4)
    assert len(tiny_math.generate("test", 250)) == 250


def test_splits_are_disjoint_by_problem():
    train = {p.problem for p in tiny_math.generate("train", 4000)}
    test = {p.problem for p in tiny_math.generate("test", 500)}
    assert train.isdisjoint(test)
    assert all(tiny_math.split_of(p.removesuffix("=?")) == "test" for p in test)


def test_every_family_and_level_present_with_unique_ids():
    problems = tiny_math.generate("test", 500)
    assert {p.data_source for p in problems} == {f"tiny-math/{f}" for f in tiny_math.FAMILIES}
    assert {p.level for p in problems} == set(tiny_math.LEVELS)
    assert len({p.id for p in problems}) == len(problems)


def test_gold_answers_are_exact_and_canonical():
    for p in tiny_math.generate("train", 1500):
        expression = p.problem.removesuffix("=?")
        value = _value(expression)
        assert Fraction(p.answer) == value, p
        if value.denominator == 1:
            assert p.answer == str(value.numerator)
        elif p.data_source.endswith("decimal"):
            assert "." in p.answer and not p.answer.endswith("0")
        else:
            assert p.answer == f"{value.numerator}/{value.denominator}"


@pytest.mark.parametrize(
    "gold, forms",
    [
        ("3/4", ["3/4", "\\frac{3}{4}", "0.75"]),
        ("-7/3", ["-7/3", "-\\frac{7}{3}"]),
        ("2.5", ["2.5", "5/2", "\\frac{5}{2}"]),
        ("-12", ["-12"]),
    ],
)
def test_answer_forms(gold, forms):
    assert tiny_math.answer_forms(gold) == forms


def test_unknown_inputs_are_named():
    with pytest.raises(ValueError, match="split 'dev'"):
        tiny_math.generate("dev", 3)
    with pytest.raises(ValueError, match="family 'pow'"):
        tiny_math.generate("train", 3, families=["pow"])


def test_prompt_asks_for_boxed_answer():
    prompt = render_prompt(tiny_math.generate("test", 1)[0])
    assert "\\boxed{}" in prompt and prompt.endswith("A: ")
    assert "{problem}" in DEFAULT_PROMPT_TEMPLATE
